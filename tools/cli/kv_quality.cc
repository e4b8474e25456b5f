#include "kv_quality.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/engine/perplexity.h"
#include "common/kv_codec/kv_transform_codec.h"
#include "common/model/model_fingerprint.h"
#include "common/util/check.h"
#include "in_memory_handoff.h"
#include "logit_math.h"

namespace baton::cli {
namespace {

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

struct Variant {
  InMemoryHandoff handoff;  // wire and store codecs, both ends the same model
  std::shared_ptr<const KvTransformCodec> transform;  // a transform codec's coder
  std::string error;        // non-empty: not valid for this model
  // Sums over chunks.
  double nll = 0.0;
  double kl = 0.0;
  int64_t scored_tokens = 0;
  uint64_t wire_bytes = 0;  // block payloads after zstd
  uint64_t raw_bytes = 0;   // before zstd
  int64_t wire_tokens = 0;
  int64_t greedy_equal = 0;
  int64_t greedy_total = 0;
  int64_t first_divergence_sum = 0;  // greedy_tokens when no difference
  int64_t prompts = 0;
};

// What every chunk of the run shares.
struct QualitySetup {
  Engine* engine = nullptr;
  int n_vocab = 0;
  int64_t prompts = 0;        // chunks whose first half prompts the greedy comparison
  int64_t greedy_tokens = 0;  // per prompt
};

// Per-chunk state shared by the variants: the baseline's logits and greedy
// tokens (the baseline runs first).
struct ChunkState {
  std::vector<float> logits, base_logits;  // [scored, n_vocab]
  std::vector<double> log_p, log_q;
  std::vector<std::vector<int32_t>> base_greedy;  // per greedy prompt
};

// Greedy tokens after the handoff of prompt [0, P - 1): the edge runs token
// P - 1, then decodes.
absl::StatusOr<std::vector<int32_t>> greedy_after_handoff(const QualitySetup& s, const F32KvCache& cloud,
                                                          std::span<const int32_t> prompt, const Variant& v) {
  const int64_t p = static_cast<int64_t>(prompt.size());
  KvSegmentLoad load;
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> edge,
                         hand_off(v.handoff, cloud, prompt.first(p - 1), p + s.greedy_tokens, &load));
  std::vector<float> logits;
  BATON_RETURN_IF_ERROR(s.engine->prefill(prompt.subspan(p - 1), *edge, &logits));
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < s.greedy_tokens; ++i) {
    tokens.push_back(argmax(logits));
    if (i + 1 < s.greedy_tokens) BATON_RETURN_IF_ERROR(s.engine->decode_step(tokens.back(), *edge, &logits));
  }
  return tokens;
}

// The greedy comparison of variant `vi` after chunk `ci`'s first half.
absl::Status compare_greedy(const QualitySetup& s, const F32KvCache& cloud, std::span<const int32_t> prompt,
                            size_t ci, size_t vi, Variant& v, ChunkState& state) {
  BATON_ASSIGN_OR_RETURN(const std::vector<int32_t> greedy, greedy_after_handoff(s, cloud, prompt, v));
  if (vi == 0) state.base_greedy[ci] = greedy;
  const std::vector<int32_t>& base = state.base_greedy[ci];
  int64_t first_difference = s.greedy_tokens;
  for (int64_t i = 0; i < s.greedy_tokens; ++i) {
    if (greedy[i] == base[i]) {
      ++v.greedy_equal;
    } else if (first_difference == s.greedy_tokens) {
      first_difference = i;
    }
  }
  v.greedy_total += s.greedy_tokens;
  v.first_divergence_sum += first_difference;
  ++v.prompts;
  return absl::OkStatus();
}

// Variant `vi` on chunk `ci`: the first half handed over, the second half
// scored on top of it (and the greedy comparison on the first prompts).
absl::Status run_variant(const QualitySetup& s, const F32KvCache& cloud, const std::vector<int32_t>& t, size_t ci,
                         size_t vi, Variant& v, ChunkState& state) {
  const int64_t n = static_cast<int64_t>(t.size());
  const int64_t half = n / 2, scored = n - half;
  const std::span<const int32_t> tokens(t);
  KvSegmentLoad load;
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> edge,
                         hand_off(v.handoff, cloud, tokens.first(half - 1), n, &load));
  BATON_RETURN_IF_ERROR(s.engine->prefill(tokens.subspan(half - 1, scored), *edge, nullptr, &state.logits));
  v.wire_bytes += load.encoded_bytes;
  v.raw_bytes += load.raw_bytes;
  v.wire_tokens += load.token_count;
  for (int64_t i = 0; i < scored; ++i) {
    const std::span<const float> row(state.logits.data() + i * s.n_vocab, s.n_vocab);
    v.nll += negative_log_likelihood(row, t[half + i]);
    if (vi == 0) continue;
    log_softmax(std::span<const float>(state.base_logits.data() + i * s.n_vocab, s.n_vocab), state.log_p);
    log_softmax(row, state.log_q);
    v.kl += kl_divergence(state.log_p, state.log_q);
  }
  v.scored_tokens += scored;
  if (vi == 0) state.base_logits = state.logits;
  if (static_cast<int64_t>(ci) >= s.prompts) return absl::OkStatus();
  return compare_greedy(s, cloud, tokens.first(half), ci, vi, v, state);
}

// Every chunk through every variant; the NLL of the engine's own F32 KV (no
// handoff) goes to `f32_nll`.
absl::Status run_chunks(const QualitySetup& s, const std::vector<std::vector<int32_t>>& chunks,
                        std::vector<Variant>& variants, double* f32_nll) {
  ChunkState state;
  state.base_greedy.resize(static_cast<size_t>(s.prompts));
  const KvGeometry geometry = s.engine->kv_geometry();
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const std::vector<int32_t>& t = chunks[ci];
    const int64_t n = static_cast<int64_t>(t.size());
    const int64_t half = n / 2;  // prompt [0, half); the cloud sends [0, half - 1)
    const std::span<const int32_t> tokens(t);
    F32KvCache cloud(geometry, half);
    BATON_RETURN_IF_ERROR(s.engine->prefill(tokens.first(half - 1), cloud, nullptr));
    {  // Local F32 KV, no handoff: the engine's own reference.
      F32KvCache local(geometry, n);
      BATON_RETURN_IF_ERROR(s.engine->prefill(tokens.first(n - 1), local, nullptr, &state.logits));
      for (int64_t i = 0; i < n - half; ++i) {
        *f32_nll += negative_log_likelihood(
            std::span<const float>(state.logits.data() + (half - 1 + i) * s.n_vocab, s.n_vocab), t[half + i]);
      }
    }
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      Variant& v = variants[vi];
      if (!v.error.empty()) continue;
      if (absl::Status st = run_variant(s, cloud, t, ci, vi, v, state); !st.ok()) {
        if (vi == 0) return absl::Status(st.code(), absl::StrCat("the f16 baseline failed: ", st.message()));
        v.error = std::string(st.message());
      }
    }
  }
  return absl::OkStatus();
}

// The figures of one variant against the baseline's perplexity.
KvQualityRow figures(const Variant& v, double base_ppl, double f16_bytes_per_token) {
  KvQualityRow r;
  r.codec = v.handoff.wire.to_string();
  r.store_codec = v.handoff.store.to_string();
  r.error = v.error;
  if (!v.error.empty() || v.scored_tokens == 0) return r;
  r.wire_bpt = static_cast<double>(v.wire_bytes) / static_cast<double>(v.wire_tokens);
  r.raw_bpt = static_cast<double>(v.raw_bytes) / static_cast<double>(v.wire_tokens);
  r.ratio = r.wire_bpt / f16_bytes_per_token;
  r.store_bpt = static_cast<double>(QuantizedKvCache::bytes_per_token(v.handoff.store, v.handoff.geometry));
  r.ppl = std::exp(v.nll / v.scored_tokens);
  r.ppl_change_pct = 100.0 * (r.ppl / base_ppl - 1.0);
  r.mean_kl = v.kl / v.scored_tokens;
  r.agreement = v.greedy_total > 0 ? static_cast<double>(v.greedy_equal) / v.greedy_total : 0.0;
  r.first_divergence = v.prompts > 0 ? static_cast<double>(v.first_divergence_sum) / v.prompts : 0.0;
  return r;
}

// A transform codec's coder for variant `v` (its error when it has none).
void bind_transform(const std::shared_ptr<const KvCalibration>& calibration, Variant& v) {
  if (calibration == nullptr) {
    v.error = "the transform codec needs --calibration FILE (baton model calibrate)";
    return;
  }
  absl::StatusOr<std::unique_ptr<KvTransformCodec>> coder = KvTransformCodec::Create(calibration, v.handoff.wire);
  if (!coder.ok()) {
    v.error = std::string(coder.status().message());
    return;
  }
  v.transform = std::move(*coder);
  v.handoff.wire = v.transform->config();
  v.handoff.store = v.transform->int8_config();
  v.handoff.transform = v.transform.get();
}

// The variants, the baseline first; one of a name the model does not fit
// carries its error.
absl::StatusOr<std::vector<Variant>> make_variants(const std::vector<std::string>& codecs, const InMemoryHandoff& base,
                                                   const std::shared_ptr<const KvCalibration>& calibration) {
  std::vector<Variant> variants;
  std::vector<std::string> names = {kKvQualityBaselineCodec};
  names.insert(names.end(), codecs.begin(), codecs.end());
  for (const std::string& name : names) {
    BATON_ASSIGN_OR_RETURN(const KvCodecConfig c, parse_kv_codec_config(name));
    if (!variants.empty() && c == variants.front().handoff.wire) continue;  // the baseline again
    Variant v;
    v.handoff = base;
    v.handoff.wire = c;
    v.handoff.store = QuantizedKvCache::store_config_for(c);
    if (absl::Status st = c.validate(base.geometry); !st.ok()) v.error = std::string(st.message());
    if (c.transform && v.error.empty()) bind_transform(calibration, v);
    variants.push_back(std::move(v));
  }
  return variants;
}

}  // namespace

absl::StatusOr<KvQualityMeasurement> measure_kv_quality(const Model& model, Engine& engine,
                                                        const std::vector<std::vector<int32_t>>& chunks,
                                                        const std::vector<std::string>& codecs,
                                                        const std::shared_ptr<const KvCalibration>& calibration,
                                                        const KvQualityOptions& options) {
  for (const std::vector<int32_t>& chunk : chunks) {
    if (chunk.size() < 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a chunk of ", chunk.size(), " tokens: each needs at least 4 (a prompt half and a scored half)"));
    }
  }
  if (chunks.empty()) return absl::InvalidArgumentError("no chunks to measure the KV codecs on");
  BATON_ASSIGN_OR_RETURN(const ModelFingerprint fingerprint, model_fingerprint(model));
  const KvRope rope = kv_rope_of(model);
  InMemoryHandoff base;
  base.cloud = base.edge = HandoffEnd{&fingerprint, &rope};
  base.geometry = engine.kv_geometry();
  BATON_ASSIGN_OR_RETURN(std::vector<Variant> variants, make_variants(codecs, base, calibration));
  const ModelSpec& spec = model.spec();
  const QualitySetup setup{&engine, spec.n_vocab, options.prompts, options.greedy_tokens};
  double f32_nll = 0.0;
  BATON_RETURN_IF_ERROR(run_chunks(setup, chunks, variants, &f32_nll));

  KvQualityMeasurement m;
  m.scored_tokens = variants.front().scored_tokens;
  m.prompts = std::min<int64_t>(options.prompts, static_cast<int64_t>(chunks.size()));
  m.f16_bytes_per_token = 2.0 * static_cast<double>(spec.kv_elements_per_token());
  m.baseline_perplexity = std::exp(variants.front().nll / m.scored_tokens);
  m.f32_local_perplexity = std::exp(f32_nll / m.scored_tokens);
  for (const Variant& v : variants) m.rows.push_back(figures(v, m.baseline_perplexity, m.f16_bytes_per_token));
  return m;
}

std::vector<KvCodecQuality> kv_quality_table(const KvQualityMeasurement& measurement) {
  std::vector<KvCodecQuality> table;
  for (size_t i = 1; i < measurement.rows.size(); ++i) {
    const KvQualityRow& r = measurement.rows[i];
    if (!r.error.empty() || !(r.ratio > 0) || !std::isfinite(r.ratio) || !std::isfinite(r.ppl_change_pct) ||
        !std::isfinite(r.mean_kl) || table.size() == kMaxKvQualityRows) {
      continue;
    }
    table.push_back(KvCodecQuality{r.codec, r.ratio, r.ppl_change_pct, std::max(0.0, r.mean_kl)});
  }
  return table;
}

}  // namespace baton::cli
