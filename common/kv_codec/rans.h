// rANS entropy coder for the transform KV codec (kv_transform_codec.h): a
// static model per column, interleaved states, byte-wise renormalization.
//
// The data is a table of n_rows x n_cols symbols, row-major (row = token,
// column = a transform component of one head). Column c is coded with
// models[c]; both ends build the same models from the same calibration, so no
// table travels. A column whose model has a single symbol costs nothing and
// reads nothing. Models are quantized to frequencies that sum to
// 1 << kRansProbBits, every symbol >= 1 (nothing is unencodable).
//
// Stream format (little-endian): for each of the kRansLanes states, its
// 32-bit final encoder state, then the renormalization bytes in decoding
// order. Symbol i of the flattened active (non-constant) symbols goes to lane
// i % kRansLanes. The decoder checks every read against the buffer end, that
// every state ends at its initial value and that no byte is left over:
// hostile or truncated bytes give InvalidArgument, never a crash or a read
// past the end.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton {

inline constexpr int kRansProbBits = 12;  // frequencies sum to 4096
inline constexpr int kRansMaxSymbols = 256;
inline constexpr int kRansLanes = 8;

// The encoder's constants for one symbol (division by a reciprocal).
struct RansEncSymbol {
  uint32_t x_max;      // renormalize while x >= x_max
  uint32_t rcp_freq;   // ceil(2^(shift + 31) / freq), or ~0 for freq 1
  uint32_t bias;       // cum, or cum + 4095 for freq 1
  uint16_t cmpl_freq;  // 4096 - freq
  uint16_t rcp_shift;  // 32 + shift - 1 (0 + 32 for freq 1)
};

// A static symbol model (one column's distribution), with the tables both
// coders read precomputed (a model serves many calls).
struct RansModel {
  std::vector<uint16_t> freq;       // [n_symbols], each >= 1, sum == 1 << kRansProbBits
  std::vector<uint16_t> cum;        // [n_symbols + 1], cum[0] = 0, cum[n] = 1 << kRansProbBits
  std::vector<uint8_t> slot_symbol;  // [1 << kRansProbBits]: the symbol owning each slot
  std::vector<uint32_t> freq_cum;    // [n_symbols]: freq | cum << 16 (the decoder's)
  std::vector<RansEncSymbol> enc;    // [n_symbols] (the encoder's)
  int n_symbols() const { return static_cast<int>(freq.size()); }
  bool constant() const { return freq.size() <= 1; }
};

// A model from non-negative weights (probabilities or counts) of symbols
// 0..n-1, 1 <= n <= kRansMaxSymbols. Every symbol gets frequency >= 1; the
// rounding keeps the coding cost within ~1% of the weights' entropy where
// possible. InvalidArgument for n out of range, a negative or non-finite
// weight, or all-zero weights with n > 1.
absl::StatusOr<RansModel> make_rans_model(std::span<const double> weights);

// Encodes symbols[r * n_cols + c] with models[c] (models.size() == n_cols).
// InvalidArgument for a symbol outside its column's model.
absl::StatusOr<std::string> rans_encode(const uint8_t* symbols, int64_t n_rows, int n_cols,
                                        std::span<const RansModel* const> models);

// Decodes exactly n_rows x n_cols symbols into out (constant columns get
// symbol 0). InvalidArgument on truncated, trailing or inconsistent bytes.
absl::Status rans_decode(std::string_view bytes, int64_t n_rows, int n_cols, std::span<const RansModel* const> models,
                         uint8_t* out);

// Ideal cost in bits of coding `symbols` with `models` (the same layout), for
// tests and bit allocation.
double rans_ideal_bits(const uint8_t* symbols, int64_t n_rows, int n_cols, std::span<const RansModel* const> models);

}  // namespace baton
