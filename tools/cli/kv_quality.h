// What a KV codec costs in model quality, measured through the real handoff
// (`baton bench kv-quality` reports it; `baton model calibrate` stores it as
// the calibration's quality table, which the edge's --codec auto chooses
// from). For each chunk of n tokens the "cloud" prefills [0, n/2 - 1) with
// F32 KV and writes that segment with the wire codec (in_memory_handoff.h:
// encode, stream writer); the "edge" reads it into a fresh store configured
// by QuantizedKvCache::store_config_for(wire) and runs tokens [n/2 - 1, n)
// teacher-forced on top of it (the n-1 rule: the last prompt token is the
// edge's own), their KV appended to the same store. Per codec, against the
// F16 handoff:
//   - perplexity of the second halves (tokens [n/2, n)) and its change;
//   - mean KL(p_f16 || p_codec) of the next-token distributions there;
//   - greedy agreement: after the first `prompts` chunks' first halves, the
//     fraction of `greedy_tokens` greedy tokens equal to the F16 run's,
//     position by position (and the mean position of the first difference);
//   - wire bytes per token (payloads after zstd) and the ratio to raw F16,
//     and the edge store's bytes per token.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/engine.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/model/model.h"

namespace baton::cli {

// The reference every codec is compared with: lossless F16 on the wire and
// in the store.
inline constexpr char kKvQualityBaselineCodec[] = "f16";

// One codec's figures against the F16 handoff.
struct KvQualityRow {
  std::string codec;        // the wire codec
  std::string store_codec;  // the edge store's
  std::string error;        // non-empty: not valid for this model, or it failed
  double wire_bpt = 0, raw_bpt = 0, ratio = 0, store_bpt = 0;
  double ppl = 0, ppl_change_pct = 0, mean_kl = 0, agreement = 0, first_divergence = 0;
};

struct KvQualityOptions {
  int64_t prompts = 0;        // chunks whose first half prompts the greedy comparison
  int64_t greedy_tokens = 1;  // per prompt
};

struct KvQualityMeasurement {
  int64_t scored_tokens = 0;
  int64_t prompts = 0;                // greedy prompts run
  double f16_bytes_per_token = 0;     // 2 bytes per K/V element
  double baseline_perplexity = 0;     // of the F16 handoff
  double f32_local_perplexity = 0;    // of the engine's own F32 KV, no handoff
  std::vector<KvQualityRow> rows;     // the F16 baseline first, then `codecs` in order
};

// Measures `codecs` (names, kv_codec_config.h; the F16 baseline runs first
// whether named or not) over `chunks` (token ids, each its own sequence of
// at least 4). A name the model does not fit, or a transform codec without
// `calibration`, gets a row with its error; only the baseline failing is an
// error.
absl::StatusOr<KvQualityMeasurement> measure_kv_quality(const Model& model, Engine& engine,
                                                        const std::vector<std::vector<int32_t>>& chunks,
                                                        const std::vector<std::string>& codecs,
                                                        const std::shared_ptr<const KvCalibration>& calibration,
                                                        const KvQualityOptions& options);

// The rows of `measurement` that measured (no error), but the baseline, as a
// calibration's quality table.
std::vector<KvCodecQuality> kv_quality_table(const KvQualityMeasurement& measurement);

}  // namespace baton::cli
