// The .batoncal file and the builder of kv_calibration.h.
//
// File layout (little-endian, no padding; the same calibration gives the
// same bytes):
//   "BATONCAL"                     8 bytes
//   u32 version                    1, or 2 with the quality table
//   u32 length + model_digest      at most kMaxStringBytes
//   u32 n_layer, n_head_kv, head_dim
//   u8  pre_rope_keys              0 | 1
//   u64 tokens                     <= INT64_MAX
//   u32 length + source            at most kMaxStringBytes
//   u32 shape bins                 kKvShapeBins
//   per (layer, kind K then V, head), in KvCalibration::heads order:
//     f32 mean[head_dim], f32 variance[head_dim], f32 basis[head_dim * head_dim]
//   per (layer, kind): f32 shape[kKvShapeBins]
//   version 2 only, the quality table:
//     u32 rows                     1..kMaxKvQualityRows
//     per row: u32 length + codec name (at most kMaxKvQualityCodecBytes,
//              canonical), f64 wire_ratio, f64 ppl_delta_pct, f64 mean_kl
// and nothing after. Version 1 is the file without the table, so a
// calibration without one keeps its old bytes and digest.
#include "common/kv_codec/kv_calibration.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_codec/symmetric_eigen.h"
#include "common/util/atomic_file.h"
#include "common/util/check.h"
#include "common/util/read_file.h"

namespace baton {
namespace {

static_assert(std::endian::native == std::endian::little, "the .batoncal format assumes a little-endian host");

constexpr char kMagic[8] = {'B', 'A', 'T', 'O', 'N', 'C', 'A', 'L'};
constexpr uint32_t kVersion = 1;               // without the quality table
constexpr uint32_t kVersionWithQuality = 2;    // with it
// Caps checked before anything is allocated.
constexpr int kMaxLayers = 512;
constexpr int kMaxKvHeads = 256;
constexpr int kMaxHeadDim = 1024;
constexpr uint64_t kMaxArrayBytes = uint64_t{1} << 30;
constexpr uint32_t kMaxStringBytes = 4096;
// One quality row at most: name length, name, three f64.
constexpr uint64_t kMaxQualityRowBytes = 4 + kMaxKvQualityCodecBytes + 3 * 8;
// The file around the arrays: magic, version, two strings and the scalars,
// and the quality table.
constexpr uint64_t kMaxFileBytes =
    kMaxArrayBytes + 2 * kMaxStringBytes + 64 + 4 + kMaxKvQualityRows * kMaxQualityRowBytes;
// Tolerances of parse(): |B B^T - I| per entry, |sum(shape) - 1|.
constexpr float kOrthonormalTolerance = 1e-3f;
constexpr double kShapeSumTolerance = 1e-3;
// A component counts in the shape histograms when its variance is above this
// fraction of its head's total: below ~1e-14 the f32 rounding of the basis
// leaks more variance from the large components into it than it has, and its
// z values would be noise.
constexpr double kShapeMinRelativeVariance = 1e-12;

const char* kind_name(bool is_key) { return is_key ? "K" : "V"; }

absl::Status check_caps(int n_layer, int n_head_kv, int head_dim) {
  for (const auto& [name, value, cap] : {std::tuple{"n_layer", n_layer, kMaxLayers},
                                         std::tuple{"n_head_kv", n_head_kv, kMaxKvHeads},
                                         std::tuple{"head_dim", head_dim, kMaxHeadDim}}) {
    if (value < 1 || value > cap) {
      return absl::InvalidArgumentError(absl::StrFormat("KV calibration: %s %d is outside 1..%d", name, value, cap));
    }
  }
  return absl::OkStatus();
}

// f32 values of all arrays of a calibration of this shape.
uint64_t array_floats(int n_layer, int n_head_kv, int head_dim) {
  const uint64_t d = static_cast<uint64_t>(head_dim);
  const uint64_t per_head = d * d + 2 * d;
  return static_cast<uint64_t>(n_layer) * 2 * (static_cast<uint64_t>(n_head_kv) * per_head + kKvShapeBins);
}

// ---- serialization ----

void put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_string(std::string& out, const std::string& s) {
  put_u32(out, static_cast<uint32_t>(s.size()));
  out += s;
}
void put_floats(std::string& out, const std::vector<float>& v) {
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}
void put_f64(std::string& out, double v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

// ---- parsing ----

class ByteReader {
 public:
  explicit ByteReader(std::string_view bytes) : bytes_(bytes) {}
  size_t left() const { return bytes_.size() - at_; }

  absl::StatusOr<std::string_view> take(size_t n, std::string_view field) {
    if (n > left()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KV calibration: truncated at %s (needs %d bytes, %d left)", field, n, left()));
    }
    const std::string_view out = bytes_.substr(at_, n);
    at_ += n;
    return out;
  }
  template <typename T>
  absl::StatusOr<T> scalar(std::string_view field) {
    BATON_ASSIGN_OR_RETURN(const std::string_view raw, take(sizeof(T), field));
    T v;
    std::memcpy(&v, raw.data(), sizeof(T));
    return v;
  }
  absl::StatusOr<std::string> string(std::string_view field) {
    BATON_ASSIGN_OR_RETURN(const uint32_t n, scalar<uint32_t>(std::string(field) + " length"));
    if (n > kMaxStringBytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KV calibration: %s has %d bytes (at most %d)", field, n, kMaxStringBytes));
    }
    BATON_ASSIGN_OR_RETURN(const std::string_view raw, take(n, field));
    return std::string(raw);
  }
  // `n` floats; the caller has checked that they fit in left().
  std::vector<float> floats(size_t n) {
    std::vector<float> v(n);
    std::memcpy(v.data(), bytes_.data() + at_, n * sizeof(float));
    at_ += n * sizeof(float);
    return v;
  }

 private:
  std::string_view bytes_;
  size_t at_ = 0;
};

absl::StatusOr<int> read_dim(ByteReader& in, const char* field) {
  BATON_ASSIGN_OR_RETURN(const uint32_t v, in.scalar<uint32_t>(field));
  if (v > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(absl::StrFormat("KV calibration: %s %d is too large", field, v));
  }
  return static_cast<int>(v);
}

// Magic, version and the scalars; `heads` and `shape` stay empty.
// `*with_quality`: the file is version 2 (a quality table follows the arrays).
absl::StatusOr<KvCalibration> parse_header(ByteReader& in, bool* with_quality) {
  BATON_ASSIGN_OR_RETURN(const std::string_view magic, in.take(sizeof kMagic, "magic"));
  if (magic != std::string_view(kMagic, sizeof kMagic)) {
    return absl::InvalidArgumentError("KV calibration: not a .batoncal file (magic is not BATONCAL)");
  }
  BATON_ASSIGN_OR_RETURN(const uint32_t version, in.scalar<uint32_t>("version"));
  if (version != kVersion && version != kVersionWithQuality) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV calibration: version %d is not a supported version (%d or %d)", version, kVersion, kVersionWithQuality));
  }
  *with_quality = version == kVersionWithQuality;
  KvCalibration c;
  BATON_ASSIGN_OR_RETURN(c.model_digest, in.string("model_digest"));
  BATON_ASSIGN_OR_RETURN(c.n_layer, read_dim(in, "n_layer"));
  BATON_ASSIGN_OR_RETURN(c.n_head_kv, read_dim(in, "n_head_kv"));
  BATON_ASSIGN_OR_RETURN(c.head_dim, read_dim(in, "head_dim"));
  BATON_RETURN_IF_ERROR(check_caps(c.n_layer, c.n_head_kv, c.head_dim));
  BATON_ASSIGN_OR_RETURN(const uint8_t pre_rope, in.scalar<uint8_t>("pre_rope_keys"));
  if (pre_rope > 1) {
    return absl::InvalidArgumentError(absl::StrFormat("KV calibration: pre_rope_keys is %d, not 0 or 1", pre_rope));
  }
  c.pre_rope_keys = pre_rope == 1;
  BATON_ASSIGN_OR_RETURN(const uint64_t tokens, in.scalar<uint64_t>("tokens"));
  if (tokens > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(absl::StrFormat("KV calibration: tokens %d is too large", tokens));
  }
  c.tokens = static_cast<int64_t>(tokens);
  BATON_ASSIGN_OR_RETURN(c.source, in.string("source"));
  BATON_ASSIGN_OR_RETURN(const uint32_t bins, in.scalar<uint32_t>("shape bins"));
  if (bins != static_cast<uint32_t>(kKvShapeBins)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV calibration: shape bins %d, expected %d", bins, kKvShapeBins));
  }
  return c;
}

// First non-finite value of `v`, or -1.
int64_t first_non_finite(const std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

// Eight independent partial sums, so the compiler vectorizes the loop
// without reassociating (f32 error ~1e-5 at d = 1024, far below the
// tolerance).
float dot(const float* a, const float* b, int d) {
  float lane[8] = {};
  int i = 0;
  for (; i + 8 <= d; i += 8) {
    for (int j = 0; j < 8; ++j) lane[j] += a[i + j] * b[i + j];
  }
  for (; i < d; ++i) lane[0] += a[i] * b[i];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

absl::Status check_orthonormal(const std::vector<float>& basis, int d, const std::string& where) {
  for (int i = 0; i < d; ++i) {
    const float* row_i = basis.data() + static_cast<size_t>(i) * d;
    for (int j = i; j < d; ++j) {
      const float product = dot(row_i, basis.data() + static_cast<size_t>(j) * d, d);
      const float expected = i == j ? 1.0f : 0.0f;
      if (!(std::fabs(product - expected) <= kOrthonormalTolerance)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "KV calibration: %s basis is not orthonormal: rows %d and %d have dot product %g (expected %g within %g)",
            where, i, j, product, expected, kOrthonormalTolerance));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status check_head(const KvCalibrationHead& h, int d, const std::string& where) {
  for (const auto& [name, values] : {std::pair{"mean", &h.mean}, std::pair{"variance", &h.variance},
                                     std::pair{"basis", &h.basis}}) {
    if (const int64_t bad = first_non_finite(*values); bad >= 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KV calibration: %s %s[%d] is %g", where, name, bad, (*values)[static_cast<size_t>(bad)]));
    }
  }
  for (size_t i = 0; i < static_cast<size_t>(d); ++i) {
    const float v = h.variance[i];
    if (v < 0 || (i > 0 && v > h.variance[i - 1])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "KV calibration: %s variance[%d] = %g: variances must be >= 0 and descending", where, i, v));
    }
  }
  return check_orthonormal(h.basis, d, where);
}

absl::Status check_shape(const std::vector<float>& shape, const std::string& where) {
  double sum = 0.0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (!std::isfinite(shape[i]) || shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KV calibration: %s shape[%d] is %g (must be finite and >= 0)", where, i, shape[i]));
    }
    sum += shape[i];
  }
  if (std::fabs(sum - 1.0) > kShapeSumTolerance) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV calibration: %s shape sums to %g, not 1 (within %g)", where, sum, kShapeSumTolerance));
  }
  return absl::OkStatus();
}

std::string head_name(int layer, bool is_key, int head) {
  return absl::StrFormat("layer %d %s head %d", layer, kind_name(is_key), head);
}

// The arrays after the header, sizes checked against what is left first
// (exactly what is left unless a quality table follows).
absl::Status parse_arrays(ByteReader& in, bool with_quality, KvCalibration& c) {
  const uint64_t floats = array_floats(c.n_layer, c.n_head_kv, c.head_dim);
  if (floats * sizeof(float) > kMaxArrayBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV calibration: the arrays of %d layers x %d heads x %d dims take %d bytes (at most %d)",
                        c.n_layer, c.n_head_kv, c.head_dim, floats * sizeof(float), kMaxArrayBytes));
  }
  if (with_quality ? floats * sizeof(float) > in.left() : floats * sizeof(float) != in.left()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV calibration: the arrays need %d bytes for n_layer %d, n_head_kv %d, head_dim %d; the file has %d",
        floats * sizeof(float), c.n_layer, c.n_head_kv, c.head_dim, in.left()));
  }
  const size_t d = static_cast<size_t>(c.head_dim);
  c.heads.reserve(static_cast<size_t>(c.n_layer) * 2 * c.n_head_kv);
  for (int layer = 0; layer < c.n_layer; ++layer) {
    for (const bool is_key : {true, false}) {
      for (int head = 0; head < c.n_head_kv; ++head) {
        KvCalibrationHead h;
        h.mean = in.floats(d);
        h.variance = in.floats(d);
        h.basis = in.floats(d * d);
        BATON_RETURN_IF_ERROR(check_head(h, c.head_dim, head_name(layer, is_key, head)));
        c.heads.push_back(std::move(h));
      }
    }
  }
  c.shape.reserve(static_cast<size_t>(c.n_layer) * 2);
  for (int layer = 0; layer < c.n_layer; ++layer) {
    for (const bool is_key : {true, false}) {
      c.shape.push_back(in.floats(kKvShapeBins));
      BATON_RETURN_IF_ERROR(check_shape(c.shape.back(), absl::StrFormat("layer %d %s", layer, kind_name(is_key))));
    }
  }
  return absl::OkStatus();
}

// One quality row's checks: a canonical codec name and finite figures.
absl::Status check_quality_row(const KvCodecQuality& row, size_t index) {
  absl::StatusOr<KvCodecConfig> parsed = parse_kv_codec_config(row.codec);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV calibration: quality row %d: codec '%s': %s", index, row.codec, parsed.status().message()));
  }
  if (parsed->to_string() != row.codec) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV calibration: quality row %d: codec '%s' is not canonical ('%s')", index, row.codec, parsed->to_string()));
  }
  if (!std::isfinite(row.wire_ratio) || !(row.wire_ratio > 0) || !std::isfinite(row.ppl_delta_pct) ||
      !std::isfinite(row.mean_kl) || !(row.mean_kl >= 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV calibration: quality row %d (%s): wire_ratio %g, ppl_delta_pct %g, mean_kl %g (the ratio must be finite "
        "and > 0, the rest finite, the KL >= 0)",
        index, row.codec, row.wire_ratio, row.ppl_delta_pct, row.mean_kl));
  }
  return absl::OkStatus();
}

// The quality table of a version 2 file; nothing may follow it.
absl::Status parse_quality(ByteReader& in, KvCalibration& c) {
  BATON_ASSIGN_OR_RETURN(const uint32_t rows, in.scalar<uint32_t>("quality rows"));
  if (rows < 1 || rows > kMaxKvQualityRows) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV calibration: the quality table has %d rows (version 2 holds 1..%d)", rows, kMaxKvQualityRows));
  }
  c.quality.reserve(rows);
  for (uint32_t i = 0; i < rows; ++i) {
    const std::string field = absl::StrFormat("quality row %d", i);
    KvCodecQuality row;
    BATON_ASSIGN_OR_RETURN(const uint32_t length, in.scalar<uint32_t>(field + " codec length"));
    if (length > kMaxKvQualityCodecBytes) {
      return absl::InvalidArgumentError(absl::StrFormat("KV calibration: %s codec name has %d bytes (at most %d)",
                                                        field, length, kMaxKvQualityCodecBytes));
    }
    BATON_ASSIGN_OR_RETURN(const std::string_view name, in.take(length, field + " codec"));
    row.codec = std::string(name);
    BATON_ASSIGN_OR_RETURN(row.wire_ratio, in.scalar<double>(field + " wire_ratio"));
    BATON_ASSIGN_OR_RETURN(row.ppl_delta_pct, in.scalar<double>(field + " ppl_delta_pct"));
    BATON_ASSIGN_OR_RETURN(row.mean_kl, in.scalar<double>(field + " mean_kl"));
    BATON_RETURN_IF_ERROR(check_quality_row(row, i));
    c.quality.push_back(std::move(row));
  }
  if (in.left() != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV calibration: %d bytes after the quality table (the file has nothing after it)", in.left()));
  }
  return absl::OkStatus();
}

// The file without the quality table (version 1).
std::string serialize_without_quality(const KvCalibration& c) {
  const size_t d = static_cast<size_t>(c.head_dim);
  BATON_CHECK(c.heads.size() == static_cast<size_t>(c.n_layer) * 2 * c.n_head_kv, "heads do not match the geometry");
  BATON_CHECK(c.shape.size() == static_cast<size_t>(c.n_layer) * 2, "shapes do not match the geometry");
  std::string out;
  out.reserve(128 + c.model_digest.size() + c.source.size() + array_floats(c.n_layer, c.n_head_kv, c.head_dim) * 4 +
              c.quality.size() * kMaxQualityRowBytes);
  out.append(kMagic, sizeof kMagic);
  put_u32(out, kVersion);
  put_string(out, c.model_digest);
  put_u32(out, static_cast<uint32_t>(c.n_layer));
  put_u32(out, static_cast<uint32_t>(c.n_head_kv));
  put_u32(out, static_cast<uint32_t>(c.head_dim));
  out.push_back(c.pre_rope_keys ? 1 : 0);
  put_u64(out, static_cast<uint64_t>(c.tokens));
  put_string(out, c.source);
  put_u32(out, static_cast<uint32_t>(kKvShapeBins));
  for (const KvCalibrationHead& h : c.heads) {
    BATON_CHECK(h.mean.size() == d && h.variance.size() == d && h.basis.size() == d * d, "head arrays of head_dim");
    put_floats(out, h.mean);
    put_floats(out, h.variance);
    put_floats(out, h.basis);
  }
  for (const std::vector<float>& s : c.shape) {
    BATON_CHECK(s.size() == static_cast<size_t>(kKvShapeBins), "shape of kKvShapeBins");
    put_floats(out, s);
  }
  return out;
}

}  // namespace

absl::Status KvCalibration::check_geometry(const KvGeometry& geometry) const {
  for (const auto& [name, ours, theirs] : {std::tuple{"n_layer", n_layer, geometry.n_layer},
                                           std::tuple{"n_head_kv", n_head_kv, geometry.n_head_kv},
                                           std::tuple{"head_dim", head_dim, geometry.head_dim}}) {
    if (ours != theirs) {
      return absl::FailedPreconditionError(
          absl::StrFormat("KV calibration is for %s %d but the model has %s %d", name, ours, name, theirs));
    }
  }
  return absl::OkStatus();
}

std::string serialize_kv_calibration(const KvCalibration& c) {
  std::string out = serialize_without_quality(c);
  if (c.quality.empty()) return out;
  BATON_CHECK(c.quality.size() <= kMaxKvQualityRows, "quality table over its cap");
  const uint32_t version = kVersionWithQuality;
  std::memcpy(out.data() + sizeof kMagic, &version, sizeof version);
  put_u32(out, static_cast<uint32_t>(c.quality.size()));
  for (const KvCodecQuality& row : c.quality) {
    BATON_CHECK(row.codec.size() <= kMaxKvQualityCodecBytes, "quality codec name over its cap");
    put_string(out, row.codec);
    put_f64(out, row.wire_ratio);
    put_f64(out, row.ppl_delta_pct);
    put_f64(out, row.mean_kl);
  }
  return out;
}

Digest256 kv_calibration_digest(const KvCalibration& calibration) {
  return sha256(serialize_kv_calibration(calibration));
}

absl::StatusOr<KvCalibration> parse_kv_calibration(std::string_view bytes) {
  ByteReader in(bytes);
  bool with_quality = false;
  BATON_ASSIGN_OR_RETURN(KvCalibration c, parse_header(in, &with_quality));
  BATON_RETURN_IF_ERROR(parse_arrays(in, with_quality, c));
  if (with_quality) BATON_RETURN_IF_ERROR(parse_quality(in, c));
  return c;
}

absl::StatusOr<KvCalibration> load_kv_calibration(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot read the KV calibration ", path));
  }
  if (static_cast<uint64_t>(info.st_size) > kMaxFileBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("KV calibration %s has %d bytes (at most %d)", path,
                                                      static_cast<int64_t>(info.st_size), kMaxFileBytes));
  }
  BATON_ASSIGN_OR_RETURN(const std::string bytes, read_file(path, "the KV calibration"));
  absl::StatusOr<KvCalibration> parsed = parse_kv_calibration(bytes);
  if (!parsed.ok()) return absl::Status(parsed.status().code(), absl::StrCat(path, ": ", parsed.status().message()));
  return parsed;
}

absl::Status save_kv_calibration(const KvCalibration& calibration, const std::string& path) {
  return write_file_atomically(path, serialize_kv_calibration(calibration), AtomicFileMode::kShared);
}

// ---- the builder ----

namespace {

// Mean, covariance and its eigen-decomposition of one head's vectors: the
// `d` columns at `offset` of `n` rows of `stride` floats.
absl::StatusOr<KvCalibrationHead> head_statistics(const float* rows, int64_t n, int64_t stride, int64_t offset,
                                                  int d) {
  const size_t du = static_cast<size_t>(d);
  std::vector<double> mean(du, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    const float* x = rows + t * stride + offset;
    for (size_t i = 0; i < du; ++i) mean[i] += x[i];
  }
  for (double& m : mean) m /= static_cast<double>(n);
  std::vector<double> covariance(du * du, 0.0);  // upper triangle accumulated
  std::vector<double> centered(du);
  for (int64_t t = 0; t < n; ++t) {
    const float* x = rows + t * stride + offset;
    for (size_t i = 0; i < du; ++i) centered[i] = x[i] - mean[i];
    for (size_t i = 0; i < du; ++i) {
      double* row = covariance.data() + i * du;
      const double ci = centered[i];
      for (size_t j = i; j < du; ++j) row[j] += ci * centered[j];
    }
  }
  for (double& c : covariance) c /= static_cast<double>(n);
  BATON_ASSIGN_OR_RETURN(const SymmetricEigen eigen, symmetric_eigen(covariance, d));
  KvCalibrationHead h;
  h.mean.assign(mean.begin(), mean.end());
  h.basis.assign(eigen.vectors.begin(), eigen.vectors.end());
  h.variance.resize(du);
  // Rounding leaves the smallest eigenvalues of a PSD matrix slightly below 0.
  for (size_t i = 0; i < du; ++i) h.variance[i] = static_cast<float>(std::max(0.0, eigen.values[i]));
  return h;
}

// Adds the normalized coefficients z = (b_i . (x - mean)) / sqrt(variance_i)
// of one head's vectors to `counts` ([kKvShapeBins]).
void count_shape(const float* rows, int64_t n, int64_t stride, int64_t offset, const KvCalibrationHead& h,
                 std::vector<double>& counts) {
  const size_t d = h.mean.size();
  double total = 0.0;
  for (const float v : h.variance) total += v;
  std::vector<size_t> components;
  std::vector<double> inv_sd;
  for (size_t i = 0; i < d; ++i) {
    if (h.variance[i] > 0 && h.variance[i] > kShapeMinRelativeVariance * total) {
      components.push_back(i);
      inv_sd.push_back(1.0 / std::sqrt(static_cast<double>(h.variance[i])));
    }
  }
  std::vector<double> centered(d);
  for (int64_t t = 0; t < n; ++t) {
    const float* x = rows + t * stride + offset;
    for (size_t i = 0; i < d; ++i) centered[i] = static_cast<double>(x[i]) - h.mean[i];
    for (size_t k = 0; k < components.size(); ++k) {
      const float* b = h.basis.data() + components[k] * d;
      double coefficient = 0.0;
      for (size_t i = 0; i < d; ++i) coefficient += b[i] * centered[i];
      const double bin = std::floor((coefficient * inv_sd[k] + kKvShapeRange) * (kKvShapeBins / (2 * kKvShapeRange)));
      counts[static_cast<size_t>(std::clamp(bin, 0.0, kKvShapeBins - 1.0))] += 1.0;
    }
  }
}

// Counts to probabilities; no counted component at all (every head of the
// layer and kind constant) puts all the mass on the bin of z = 0.
std::vector<float> normalized_shape(const std::vector<double>& counts) {
  double total = 0.0;
  for (const double c : counts) total += c;
  std::vector<float> shape(counts.size(), 0.0f);
  if (total == 0.0) {
    shape[counts.size() / 2] = 1.0f;
    return shape;
  }
  for (size_t i = 0; i < counts.size(); ++i) shape[i] = static_cast<float>(counts[i] / total);
  return shape;
}

}  // namespace

KvCalibrationBuilder::KvCalibrationBuilder(const KvGeometry& geometry, std::string model_digest, bool pre_rope_keys)
    : geometry_(geometry), model_digest_(std::move(model_digest)), pre_rope_keys_(pre_rope_keys) {
  if (check_caps(geometry_.n_layer, geometry_.n_head_kv, geometry_.head_dim).ok()) {
    rows_.resize(static_cast<size_t>(geometry_.n_layer) * 2);
  }
}

absl::Status KvCalibrationBuilder::add(int layer, bool is_key, const float* rows, int64_t n_tokens) {
  BATON_RETURN_IF_ERROR(check_caps(geometry_.n_layer, geometry_.n_head_kv, geometry_.head_dim));
  if (layer < 0 || layer >= geometry_.n_layer) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV calibration: layer %d is outside 0..%d", layer, geometry_.n_layer - 1));
  }
  if (n_tokens < 0 || (n_tokens > 0 && rows == nullptr)) {
    return absl::InvalidArgumentError(absl::StrFormat("KV calibration: %d rows at %p", n_tokens, rows));
  }
  const int64_t kv_dim = geometry_.kv_dim();
  if (n_tokens > std::numeric_limits<int32_t>::max() / kv_dim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV calibration: %d rows of %d floats in one call (at most %d)", n_tokens, kv_dim,
                        std::numeric_limits<int32_t>::max() / kv_dim));
  }
  const size_t count = static_cast<size_t>(n_tokens * kv_dim);
  for (size_t i = 0; i < count; ++i) {
    if (!std::isfinite(rows[i])) {
      return absl::InvalidArgumentError(absl::StrFormat("KV calibration: layer %d %s row %d column %d is %g", layer,
                                                        kind_name(is_key), i / kv_dim, i % kv_dim, rows[i]));
    }
  }
  std::vector<float>& stored = rows_[static_cast<size_t>(layer * 2 + (is_key ? 0 : 1))];
  stored.insert(stored.end(), rows, rows + count);
  return absl::OkStatus();
}

absl::StatusOr<KvCalibration> KvCalibrationBuilder::finish(std::string source) const {
  BATON_RETURN_IF_ERROR(check_caps(geometry_.n_layer, geometry_.n_head_kv, geometry_.head_dim));
  const std::string* source_field = &source;
  for (const auto& [name, value] : {std::pair{"model_digest", &model_digest_}, std::pair{"source", source_field}}) {
    if (value->size() > kMaxStringBytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KV calibration: %s has %d bytes (at most %d)", name, value->size(), kMaxStringBytes));
    }
  }
  const int64_t kv_dim = geometry_.kv_dim();
  const int64_t n = static_cast<int64_t>(rows_[0].size()) / kv_dim;
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {
    for (const bool is_key : {true, false}) {
      const size_t kind_index = static_cast<size_t>(layer * 2 + (is_key ? 0 : 1));
      const int64_t rows = static_cast<int64_t>(rows_[kind_index].size()) / kv_dim;
      if (rows < geometry_.head_dim || rows != n) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "KV calibration: layer %d %s has %d tokens; every layer and kind needs the same count, at least "
            "head_dim %d (layer 0 K has %d)",
            layer, kind_name(is_key), rows, geometry_.head_dim, n));
      }
    }
  }
  if (static_cast<uint64_t>(array_floats(geometry_.n_layer, geometry_.n_head_kv, geometry_.head_dim)) * sizeof(float) >
      kMaxArrayBytes) {
    return absl::InvalidArgumentError("KV calibration: the geometry's arrays are above the file's 1 GiB cap");
  }
  KvCalibration c;
  c.model_digest = model_digest_;
  c.n_layer = geometry_.n_layer;
  c.n_head_kv = geometry_.n_head_kv;
  c.head_dim = geometry_.head_dim;
  c.pre_rope_keys = pre_rope_keys_;
  c.tokens = n;
  c.source = std::move(source);
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {
    for (const bool is_key : {true, false}) {
      const float* rows = rows_[static_cast<size_t>(layer * 2 + (is_key ? 0 : 1))].data();
      std::vector<double> counts(kKvShapeBins, 0.0);
      for (int head = 0; head < geometry_.n_head_kv; ++head) {
        const int64_t offset = int64_t{head} * geometry_.head_dim;
        BATON_ASSIGN_OR_RETURN(KvCalibrationHead h, head_statistics(rows, n, kv_dim, offset, geometry_.head_dim));
        count_shape(rows, n, kv_dim, offset, h, counts);
        c.heads.push_back(std::move(h));
      }
      c.shape.push_back(normalized_shape(counts));
    }
  }
  return c;
}

}  // namespace baton
