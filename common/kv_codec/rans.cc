// rANS coder (rans.h): 32-bit states in [kStateLow, kStateLow << 8), byte-wise
// renormalization, kRansLanes interleaved states sharing one byte stream.
//
// The encoder runs the symbols backwards and writes bytes backwards, so the
// decoder reads everything forwards. Encoding divides by the symbol's
// frequency through a precomputed reciprocal (Alverson's method, as in
// ryg_rans): exact for every state the encoder can hold (< 2^31); its
// renormalization is branch-free too.
//
// Decoding one symbol: slot = x & 4095, s = slot_symbol[slot], then
// x = freq[s] * (x >> 12) + slot - cum[s] and the state takes 0, 1 or 2 bytes.
// The byte count depends on the state alone (x < 2^15: 2, x < 2^23: 1), so the
// renormalization is branch-free and the eight lanes' chains overlap; the
// bounds are checked once per group of eight symbols while 16 bytes remain and
// per byte after that.
#include "common/kv_codec/rans.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <span>

#include "absl/strings/str_format.h"
#include "common/util/check.h"

namespace baton {
namespace {

constexpr uint32_t kProbScale = 1u << kRansProbBits;  // 4096
constexpr uint32_t kSlotMask = kProbScale - 1;
// States live in [kStateLow, kStateLow << 8): 23 bits below, 8 bits of room
// for one byte of renormalization, 1 bit spare so x * freq never overflows.
constexpr uint32_t kStateLow = 1u << 23;
constexpr uint32_t kStateHigh = kStateLow << 8;
constexpr int kHeaderBytes = 4 * kRansLanes;
constexpr int kMaxCols = 65536;
constexpr int64_t kMaxRows = int64_t{1} << 20;
// Bounds the encoder's buffer (2 bytes per symbol at most) and the loops.
constexpr int64_t kMaxTableSymbols = int64_t{1} << 28;
// A group of kRansLanes symbols takes at most 2 bytes each.
constexpr int64_t kGroupMaxBytes = 2 * kRansLanes;

// ---- make_rans_model --------------------------------------------------------

// Bits lost (times the weight) by taking one slot from a symbol with f slots,
// and bits saved by giving it one more.
double cost_of_decrement(double p, uint32_t f) { return f <= 1 ? HUGE_VAL : p * std::log2(double(f) / (f - 1)); }
double gain_of_increment(double p, uint32_t f) { return p * std::log2(double(f + 1) / f); }

// Moves single slots from the symbol where losing one costs least to the one
// where gaining one helps most, first to reach the sum, then while a move
// still pays. The cost is separable and convex per symbol, so when no single
// move pays the frequencies are the cheapest ones >= 1 that sum to 4096.
void fix_frequencies(std::span<const double> p, std::vector<uint32_t>& f) {
  const int n = static_cast<int>(f.size());
  int64_t sum = 0;
  for (uint32_t v : f) sum += v;
  for (int guard = 0; guard < 4 * static_cast<int>(kProbScale); ++guard) {
    int dec = -1, inc = -1;
    double dec_cost = HUGE_VAL, inc_gain = -1.0;
    for (int i = 0; i < n; ++i) {
      const double c = cost_of_decrement(p[i], f[i]);
      if (c < dec_cost) dec_cost = c, dec = i;
      const double g = gain_of_increment(p[i], f[i]);
      if (g > inc_gain) inc_gain = g, inc = i;
    }
    if (sum > kProbScale) {
      --f[dec], --sum;
    } else if (sum < kProbScale) {
      ++f[inc], ++sum;
    } else if (dec != inc && inc_gain > dec_cost * (1.0 + 1e-12) + 1e-15) {
      --f[dec], ++f[inc];
    } else {
      return;
    }
  }
}

RansEncSymbol enc_symbol(uint32_t cum, uint32_t freq);

RansModel model_from_frequencies(const std::vector<uint32_t>& f) {
  RansModel m;
  const int n = static_cast<int>(f.size());
  m.freq.resize(n);
  m.cum.resize(n + 1);
  m.slot_symbol.resize(kProbScale);
  uint32_t start = 0;
  for (int s = 0; s < n; ++s) {
    m.freq[s] = static_cast<uint16_t>(f[s]);
    m.cum[s] = static_cast<uint16_t>(start);
    std::fill_n(m.slot_symbol.begin() + start, f[s], static_cast<uint8_t>(s));
    start += f[s];
  }
  m.cum[n] = static_cast<uint16_t>(start);
  for (int s = 0; s < n; ++s) {
    m.freq_cum.push_back(m.freq[s] | uint32_t{m.cum[s]} << 16);
    m.enc.push_back(enc_symbol(m.cum[s], m.freq[s]));
  }
  return m;
}

// ---- shared checks ------------------------------------------------------------

// An active (non-constant) column: the ones coded, in row order.
struct ActiveColumn {
  int col;
  const RansModel* model;
};

absl::Status check_model(const RansModel* m, int col) {
  if (m == nullptr) return absl::InvalidArgumentError(absl::StrFormat("rANS: model of column %d is null", col));
  const size_t n = m->freq.size();
  if (n < 1 || n > kRansMaxSymbols || m->cum.size() != n + 1 || m->freq_cum.size() != n || m->enc.size() != n ||
      (n > 1 && (m->slot_symbol.size() != kProbScale || m->cum[n] != kProbScale))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rANS: model of column %d is malformed (%d symbols, %d cum entries, %d slots; want 1..%d symbols, "
        "symbols + 1 cum entries ending at %d, %d slots)",
        col, n, m->cum.size(), m->slot_symbol.size(), kRansMaxSymbols, kProbScale, kProbScale));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ActiveColumn>> check_table(int64_t n_rows, int n_cols,
                                                      std::span<const RansModel* const> models) {
  if (n_rows < 0 || n_rows > kMaxRows) {
    return absl::InvalidArgumentError(absl::StrFormat("rANS: %d rows; want 0..%d", n_rows, kMaxRows));
  }
  if (n_cols < 1 || n_cols > kMaxCols) {
    return absl::InvalidArgumentError(absl::StrFormat("rANS: %d columns; want 1..%d", n_cols, kMaxCols));
  }
  if (n_rows * n_cols > kMaxTableSymbols) {
    return absl::InvalidArgumentError(absl::StrFormat("rANS: %d x %d symbols; at most %d per call", n_rows, n_cols,
                                                      kMaxTableSymbols));
  }
  if (models.size() != static_cast<size_t>(n_cols)) {
    return absl::InvalidArgumentError(absl::StrFormat("rANS: %d models for %d columns", models.size(), n_cols));
  }
  std::vector<ActiveColumn> active;
  for (int c = 0; c < n_cols; ++c) {
    if (absl::Status st = check_model(models[c], c); !st.ok()) return st;
    if (!models[c]->constant()) active.push_back({c, models[c]});
  }
  return active;
}

// ---- encoder --------------------------------------------------------------------

// One symbol's encoding constants: x -> (x / freq) * 4096 + x % freq + cum
// computed as x + bias + q * cmpl_freq with q = (x * rcp_freq) >> rcp_shift.
RansEncSymbol enc_symbol(uint32_t cum, uint32_t freq) {
  RansEncSymbol e;
  e.x_max = ((kStateLow >> kRansProbBits) << 8) * freq;
  e.cmpl_freq = static_cast<uint16_t>(kProbScale - freq);
  if (freq < 2) {
    // The reciprocal of 1 does not fit; q = x - 1 and the bias absorbs it.
    e.rcp_freq = ~0u;
    e.rcp_shift = 32;
    e.bias = cum + kProbScale - 1;
  } else {
    uint32_t shift = 0;
    while (freq > (1u << shift)) ++shift;
    e.rcp_freq = static_cast<uint32_t>(((uint64_t{1} << (shift + 31)) + freq - 1) / freq);
    e.rcp_shift = static_cast<uint16_t>(32 + shift - 1);
    e.bias = cum;
  }
  return e;
}

// Per active column, its model's symbol constants.
struct EncTables {
  std::vector<const RansEncSymbol*> symbols;  // [n_active]
  std::vector<uint16_t> n_symbols;            // [n_active]
};

EncTables enc_tables(const std::vector<ActiveColumn>& active) {
  EncTables t;
  for (const ActiveColumn& a : active) {
    t.symbols.push_back(a.model->enc.data());
    t.n_symbols.push_back(static_cast<uint16_t>(a.model->n_symbols()));
  }
  return t;
}

absl::Status bad_symbol(int64_t row, int col, int symbol, int n_symbols) {
  return absl::InvalidArgumentError(absl::StrFormat("rANS: symbol %d at row %d column %d is outside its model (%d symbols)",
                                                    symbol, row, col, n_symbols));
}

void put_state(uint32_t x, uint8_t* p) {
  for (int b = 0; b < 4; ++b) p[b] = static_cast<uint8_t>(x >> (8 * b));
}

uint32_t get_state(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// ---- decoder --------------------------------------------------------------------

// One active column as the decoder reads it: the model's slot table and, per
// symbol, freq | cum << 16 (one load instead of two).
struct DecColumn {
  const uint8_t* slot_symbol;
  const uint32_t* freq_cum;
};

// The active columns' decode tables (pointers into the models). cols is
// cyclic and kRansLanes longer than the active columns: the group of symbols
// starting at active column j reads cols[j .. j + kRansLanes - 1].
struct DecTables {
  std::vector<DecColumn> cols;
  int n_active = 0;
};

DecTables dec_tables(const std::vector<ActiveColumn>& active) {
  DecTables t;
  t.n_active = static_cast<int>(active.size());
  for (int k = 0; t.n_active > 0 && k < t.n_active + kRansLanes; ++k) {
    const int j = k % t.n_active;
    t.cols.push_back({active[j].model->slot_symbol.data(), active[j].model->freq_cum.data()});
  }
  return t;
}

inline uint8_t decode_symbol(uint32_t& x, const DecColumn& col) {
  const uint32_t slot = x & kSlotMask;
  const uint32_t s = col.slot_symbol[slot];
  const uint32_t fc = col.freq_cum[s];
  x = (fc & 0xffff) * (x >> kRansProbBits) + slot - (fc >> 16);
  return static_cast<uint8_t>(s);
}

// Spreads n_rows rows of the active columns, decoded contiguously at the front
// of `out`, to their columns; constant columns get 0. Backwards, so no row is
// overwritten before it moved (row r's destination starts at or after its
// source).
void expand_rows(const std::vector<ActiveColumn>& active, int64_t n_rows, int n_cols, uint8_t* out) {
  const int64_t n_active = static_cast<int64_t>(active.size());
  for (int64_t r = n_rows - 1; r >= 0; --r) {
    const uint8_t* src = out + r * n_active;
    uint8_t* row = out + r * n_cols;
    for (int64_t j = n_active - 1, c = n_cols - 1; c >= 0; --c) {
      row[c] = j >= 0 && active[j].col == c ? src[j--] : 0;
    }
  }
}

// Bytes the state takes after a decode step. The step maps a state in
// [kStateLow, kStateHigh) into [2^11, 2^31) (freq * (x >> 12) with x >> 12 >=
// 2^11), so it has 1..20 leading zero bits: up to 8 (x >= 2^23) it takes
// none, up to 16 one, else two, and kStateLow <= result < kStateHigh again.
// (x | 1: the compiler then knows x != 0 and needs no branch for it.)
inline uint32_t renorm_bytes(uint32_t x) { return static_cast<uint32_t>(std::countl_zero(x | 1) - 1) >> 3; }

// Unchecked: the caller guarantees 2 readable bytes at p. One variable shift
// takes the state's 0, 1 or 2 new low bytes from the next two.
inline void renorm_fast(uint32_t& x, const uint8_t*& p) {
  const uint32_t n = renorm_bytes(x);
  const uint64_t next = uint64_t{x} << 16 | uint32_t{p[0]} << 8 | p[1];
  x = static_cast<uint32_t>(next >> (16 - 8 * n));
  p += n;
}

inline bool renorm_checked(uint32_t& x, const uint8_t*& p, const uint8_t* end) {
  const uint32_t n = renorm_bytes(x);
  if (static_cast<uint32_t>(end - p) < n) return false;
  for (uint32_t b = 0; b < n; ++b) x = (x << 8) | *p++;
  return true;
}

absl::Status truncated(int64_t decoded, int64_t total, size_t size) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "rANS: stream of %d bytes ends after %d of %d symbols (truncated or corrupt)", size, decoded, total));
}

}  // namespace

absl::StatusOr<RansModel> make_rans_model(std::span<const double> weights) {
  const int n = static_cast<int>(weights.size());
  if (n < 1 || n > kRansMaxSymbols) {
    return absl::InvalidArgumentError(absl::StrFormat("rANS model: %d symbols; want 1..%d", weights.size(),
                                                      kRansMaxSymbols));
  }
  double total = 0.0;
  for (int s = 0; s < n; ++s) {
    if (!std::isfinite(weights[s]) || weights[s] < 0.0) {
      return absl::InvalidArgumentError(absl::StrFormat("rANS model: weight %g of symbol %d is not a finite "
                                                        "non-negative number", weights[s], s));
    }
    total += weights[s];
  }
  if (!std::isfinite(total)) {
    return absl::InvalidArgumentError("rANS model: the weights' sum overflows a double");
  }
  if (n == 1) return model_from_frequencies({kProbScale});
  if (total <= 0.0) {
    return absl::InvalidArgumentError(absl::StrFormat("rANS model: all %d weights are zero", n));
  }
  std::vector<double> p(n);
  std::vector<uint32_t> f(n);
  for (int s = 0; s < n; ++s) {
    p[s] = weights[s] / total;
    f[s] = std::max<uint32_t>(1, static_cast<uint32_t>(std::lround(p[s] * kProbScale)));
  }
  fix_frequencies(p, f);
  return model_from_frequencies(f);
}

absl::StatusOr<std::string> rans_encode(const uint8_t* symbols, int64_t n_rows, int n_cols,
                                        std::span<const RansModel* const> models) {
  absl::StatusOr<std::vector<ActiveColumn>> active = check_table(n_rows, n_cols, models);
  if (!active.ok()) return active.status();
  // Constant columns are not coded, but a symbol other than 0 there is lost.
  for (int c = 0; c < n_cols; ++c) {
    if (!models[c]->constant()) continue;
    for (int64_t r = 0; r < n_rows; ++r) {
      if (symbols[r * n_cols + c] != 0) return bad_symbol(r, c, symbols[r * n_cols + c], 1);
    }
  }
  const EncTables t = enc_tables(*active);
  const int n_active = static_cast<int>(active->size());
  const int64_t n_symbols = n_rows * n_active;
  // Written backwards into a scratch buffer the thread keeps (no fresh pages
  // per call), then copied out.
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(static_cast<size_t>(kHeaderBytes + 2 * n_symbols));
  std::span<uint8_t> buf(scratch);
  uint8_t* const begin = buf.data();
  uint8_t* p = begin + buf.size();
  uint32_t x[kRansLanes];
  std::fill_n(x, kRansLanes, kStateLow);
  // Backwards: the last symbol first, its bytes last in the buffer's front part.
  int64_t i = n_symbols;
  for (int64_t r = n_rows - 1; r >= 0; --r) {
    const uint8_t* row = symbols + r * n_cols;
    for (int j = n_active - 1; j >= 0; --j) {
      --i;
      const uint32_t s = row[(*active)[j].col];
      if (s >= t.n_symbols[j]) return bad_symbol(r, (*active)[j].col, static_cast<int>(s), t.n_symbols[j]);
      const RansEncSymbol& e = t.symbols[j][s];
      uint32_t& xs = x[i & (kRansLanes - 1)];
      // Branch-free "while (xs >= x_max) emit the low byte": 0..2 bytes (the
      // state is < 2^31 and x_max >= 2^19). Both are stored; the second is
      // overwritten later when not used (p never comes within 2 bytes of the
      // buffer's start: the header's 32 bytes are still ahead of it).
      const uint32_t n = (xs >= e.x_max) + (uint64_t{xs} >= uint64_t{e.x_max} << 8);
      p[-1] = static_cast<uint8_t>(xs);
      p[-2] = static_cast<uint8_t>(xs >> 8);
      p -= n;
      xs = static_cast<uint32_t>(uint64_t{xs} >> (8 * n));
      const uint32_t q = static_cast<uint32_t>((uint64_t{xs} * e.rcp_freq) >> e.rcp_shift);
      xs += e.bias + q * e.cmpl_freq;
    }
  }
  for (int lane = kRansLanes - 1; lane >= 0; --lane) {
    p -= 4;
    put_state(x[lane], p);
  }
  return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(buf.data() + buf.size() - p));
}

absl::Status rans_decode(std::string_view bytes, int64_t n_rows, int n_cols, std::span<const RansModel* const> models,
                         uint8_t* out) {
  absl::StatusOr<std::vector<ActiveColumn>> active = check_table(n_rows, n_cols, models);
  if (!active.ok()) return active.status();
  if (bytes.size() < static_cast<size_t>(kHeaderBytes)) {
    return absl::InvalidArgumentError(absl::StrFormat("rANS: stream of %d bytes is shorter than its %d-byte header",
                                                      bytes.size(), kHeaderBytes));
  }
  const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const uint8_t* const end = p + bytes.size();
  uint32_t x[kRansLanes];
  for (int lane = 0; lane < kRansLanes; ++lane, p += 4) {
    x[lane] = get_state(p);
    // Every encoder state lies in [kStateLow, kStateHigh); the decoder keeps
    // that range, which bounds its renormalization to 2 bytes.
    if (x[lane] < kStateLow || x[lane] >= kStateHigh) {
      return absl::InvalidArgumentError(absl::StrFormat("rANS: lane %d starts at state %#x, outside [%#x, %#x)", lane,
                                                        x[lane], kStateLow, kStateHigh));
    }
  }
  const DecTables t = dec_tables(*active);
  const int64_t n_symbols = n_rows * t.n_active;
  // Active symbols go to out contiguously; j is the active column of the next.
  uint8_t* dst = out;
  int j = 0;
  int64_t i = 0;
  // Whole groups while 16 bytes remain: no per-byte check. Few live values
  // (one column pointer per group) so the eight states stay in registers.
  if (n_symbols >= kRansLanes) {
    const int group_step = kRansLanes % t.n_active;
    const uint8_t* const fast_end = end - kGroupMaxBytes;
    uint8_t* const dst_fast_end = out + (n_symbols - kRansLanes);
    uint32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3], x4 = x[4], x5 = x[5], x6 = x[6], x7 = x[7];
    for (; dst <= dst_fast_end && p <= fast_end; dst += kRansLanes) {
      const DecColumn* cols = t.cols.data() + j;
      dst[0] = decode_symbol(x0, cols[0]), renorm_fast(x0, p);
      dst[1] = decode_symbol(x1, cols[1]), renorm_fast(x1, p);
      dst[2] = decode_symbol(x2, cols[2]), renorm_fast(x2, p);
      dst[3] = decode_symbol(x3, cols[3]), renorm_fast(x3, p);
      dst[4] = decode_symbol(x4, cols[4]), renorm_fast(x4, p);
      dst[5] = decode_symbol(x5, cols[5]), renorm_fast(x5, p);
      dst[6] = decode_symbol(x6, cols[6]), renorm_fast(x6, p);
      dst[7] = decode_symbol(x7, cols[7]), renorm_fast(x7, p);
      j += group_step;
      if (j >= t.n_active) j -= t.n_active;
    }
    x[0] = x0, x[1] = x1, x[2] = x2, x[3] = x3, x[4] = x4, x[5] = x5, x[6] = x6, x[7] = x7;
    i = dst - out;
  }
  for (; i < n_symbols; ++i) {
    uint32_t& xs = x[i & (kRansLanes - 1)];
    *dst++ = decode_symbol(xs, t.cols[j]);
    if (++j == t.n_active) j = 0;
    if (!renorm_checked(xs, p, end)) return truncated(i + 1, n_symbols, bytes.size());
  }
  if (p != end) {
    return absl::InvalidArgumentError(absl::StrFormat("rANS: %d trailing bytes after %d symbols", end - p, n_symbols));
  }
  for (int lane = 0; lane < kRansLanes; ++lane) {
    if (x[lane] != kStateLow) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rANS: lane %d ends at state %#x, not the initial %#x (corrupt stream or other models)", lane, x[lane],
          kStateLow));
    }
  }
  if (t.n_active != n_cols) expand_rows(*active, n_rows, n_cols, out);
  return absl::OkStatus();
}

double rans_ideal_bits(const uint8_t* symbols, int64_t n_rows, int n_cols, std::span<const RansModel* const> models) {
  BATON_CHECK(models.size() == static_cast<size_t>(n_cols), "one model per column");
  double bits = 0.0;
  std::vector<double> cost;
  for (int c = 0; c < n_cols; ++c) {
    const RansModel& m = *models[c];
    if (m.constant()) continue;
    cost.resize(m.freq.size());
    for (size_t s = 0; s < cost.size(); ++s) cost[s] = kRansProbBits - std::log2(double(m.freq[s]));
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint8_t s = symbols[r * n_cols + c];
      bits += s < cost.size() ? cost[s] : HUGE_VAL;
    }
  }
  return bits;
}

}  // namespace baton
