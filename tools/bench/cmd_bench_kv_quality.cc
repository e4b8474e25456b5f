// baton bench kv-quality: what a KV codec costs in model quality, measured
// through the real handoff. The held-out text is tokenized and cut into
// chunks (BOS first when the tokenizer adds one); for each chunk of n tokens
// the "cloud" prefills [0, n/2 - 1) with F32 KV and writes that segment with
// the wire codec (kv_handoff.h: encode, stream writer); the "edge" reads it
// into a fresh store configured by QuantizedKvCache::store_config_for(wire)
// and runs tokens [n/2 - 1, n) teacher-forced on top of it (the n-1 rule:
// the last prompt token is the edge's own), their KV appended to the same
// store. Per codec variant, against the F16 handoff:
//   - perplexity of the second halves (tokens [n/2, n)) and its change;
//   - mean KL(p_f16 || p_codec) of the next-token distributions there;
//   - greedy agreement: after the first `--prompts` chunks' first halves, the
//     fraction of `--greedy-tokens` greedy tokens equal to the F16 run's,
//     position by position (and the mean position of the first difference);
//   - wire bytes per token (payloads after zstd) and the ratio to raw F16,
//     and the edge store's bytes per token.
// Output: bench_kv_quality_report.cc.
#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench_handoff.h"
#include "bench_harness.h"
#include "bench_kv_quality.h"
#include "absl/strings/str_format.h"
#include "common/engine/perplexity.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/kv_codec/kv_transform_codec.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/check.h"
#include "common/util/read_file.h"
#include "kv_codec_list.h"
#include "logit_math.h"
#include "text_chunks.h"

namespace baton::cli {
namespace {

// The reference every variant is compared with: lossless F16 on the wire and
// in the store.
constexpr char kBaselineCodec[] = "f16";

// Default variants; "G" stands for the group size min(32, head_dim), "G2"
// for twice that (variants whose group does not fit the model are reported
// as skipped).
constexpr char kDefaultCodecs[] =
    "f16-z3,int8-gG-z3,int8-pc-gG-z3,int8-gG-had-z3,int8-gG-pre-z3,"
    "int4-gG-z3,int4-pc-gG-z3,int4-gG-pre-z3,int4-pc-gG-pre-z3,int4-gG-had-z3,int4-pc-gG-had-z3,"
    "int4-gG2-z3,int4-gG2-had-z3,int4-k8-gG-z3,int4-pc-kg64-gG-z3,int4-pc-kg128-gG-z3,"
    "tc-b1,tc-b1.5,tc-b2,tc-b2.5,tc-b3,tc-b4";

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
        if (vi == 0) return with_context("the f16 baseline failed: ", st);
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

// The run's figures; the baseline is variants[0].
KvQualityRun summarize(const std::vector<Variant>& variants, double f32_nll, const ModelSpec& spec,
                       const std::string& text_path, int64_t chunk, size_t chunks, bool bos, int64_t prompts,
                       int64_t greedy_tokens) {
  KvQualityRun result;
  result.model = spec.name;
  result.text_file = text_path;
  result.chunk_tokens = chunk;
  result.chunks = static_cast<int64_t>(chunks);
  result.scored_tokens = variants.front().scored_tokens;
  result.bos = bos;
  result.prompts = prompts;
  result.greedy_tokens = greedy_tokens;
  result.f16_bytes_per_token = 2.0 * static_cast<double>(spec.kv_elements_per_token());
  result.baseline_codec = kBaselineCodec;
  result.baseline_perplexity = std::exp(variants.front().nll / result.scored_tokens);
  result.f32_local_perplexity = std::exp(f32_nll / result.scored_tokens);
  for (const Variant& v : variants) {
    result.rows.push_back(figures(v, result.baseline_perplexity, result.f16_bytes_per_token));
  }
  return result;
}

// The variants, the baseline first; one of a name the model does not fit
// carries its error.
absl::StatusOr<std::vector<Variant>> make_variants(const std::string& codecs, const InMemoryHandoff& base,
                                                   const std::shared_ptr<const KvCalibration>& calibration) {
  std::vector<Variant> variants;
  std::vector<std::string> names = {kBaselineCodec};
  const std::string list = codecs.empty() ? expand_codec_list(kDefaultCodecs, base.geometry.head_dim) : codecs;
  for (const std::string& name : std::vector<std::string>(absl::StrSplit(list, ',', absl::SkipEmpty()))) {
    names.push_back(name);
  }
  for (const std::string& name : names) {
    BATON_ASSIGN_OR_RETURN(const KvCodecConfig c, parse_kv_codec_config(name));
    if (!variants.empty() && c == variants.front().handoff.wire) continue;  // the baseline again
    Variant v;
    v.handoff = base;
    v.handoff.wire = c;
    v.handoff.store = QuantizedKvCache::store_config_for(c);
    if (absl::Status st = c.validate(base.geometry); !st.ok()) v.error = std::string(st.message());
    if (c.transform && v.error.empty()) {
      if (calibration == nullptr) {
        v.error = "the transform codec needs --calibration FILE (baton model calibrate)";
      } else if (absl::StatusOr<std::unique_ptr<KvTransformCodec>> coder = KvTransformCodec::Create(calibration, c);
                 !coder.ok()) {
        v.error = std::string(coder.status().message());
      } else {
        v.transform = std::move(*coder);
        v.handoff.wire = v.transform->config();
        v.handoff.store = v.transform->int8_config();
        v.handoff.transform = v.transform.get();
      }
    }
    variants.push_back(std::move(v));
  }
  return variants;
}

}  // namespace

absl::Status bench_kv_quality(const Args& args) {
  ModelBenchFlags c;
  std::string text_path, codecs, calibration_path, plot_path;
  int64_t chunk = 256, max_tokens = 0, prompts = 4, greedy_tokens = 128;
  bool per_line = true;
  FlagSet flags("baton bench kv-quality",
                "--model FILE --text-file FILE [--chunk 256] [--max-tokens N] [--codecs LIST] [--json]",
                "KV codec quality through the cloud/edge handoff. Per chunk of held-out text, the KV of the "
                "first half goes over the wire with each codec into the edge store that codec implies; the "
                "second half is evaluated teacher-forced on top of it. Reports, against the F16 handoff: "
                "perplexity of the second halves and its change, mean KL divergence of the next-token "
                "distributions, greedy-token agreement after a few prompts, and wire bytes per token after "
                "zstd with the ratio to raw F16.");
  flags.add_string("model", &c.model, "GGUF model file (with tokenizer metadata)", "FILE");
  flags.add_string("text-file", &text_path, "held-out text to score", "FILE");
  flags.add_int64("chunk", &chunk, "tokens per chunk, BOS included (first half sent, second half scored)");
  flags.add_int64("max-tokens", &max_tokens, "use at most this many text tokens (0: all)");
  flags.add_string("codecs", &codecs,
                   "comma-separated wire codecs (common/kv_codec/kv_codec_config.h); default: f16/int8/int4 "
                   "variants with groups of min(32, head_dim); the f16 baseline always runs",
                   "LIST");
  flags.add_string("calibration", &calibration_path,
                   "the model's KV calibration (baton model calibrate) for the transform codecs (tc-bB.B); without "
                   "it their rows say so",
                   "FILE");
  flags.add_string("plot", &plot_path, "write the rate-distortion figure (mean KL and perplexity change vs wire "
                   "bytes / F16) as a PNG (gnuplot)", "FILE.png");
  flags.add_int64("prompts", &prompts, "chunks whose first half prompts the greedy comparison");
  flags.add_int64("greedy-tokens", &greedy_tokens, "greedy tokens per prompt");
  flags.add_int64("threads", &c.threads, "engine threads");
  flags.add_bool("per-line", &per_line,
                 "tokenize each line on its own and concatenate without newlines (the bundled tiny model's "
                 "held-out recipe); --no-per-line tokenizes the text whole");
  flags.add_bool("json", &c.json, "print one JSON object instead of the table");
  flags.require("model");
  flags.require("text-file");
  BATON_ASSIGN_OR_RETURN(const bool run, parse_bench_flags(flags, args));
  if (!run) return absl::OkStatus();
  if (chunk < 4) return absl::InvalidArgumentError("--chunk must be >= 4 (a prompt half and a scored half)");
  if (max_tokens < 0 || prompts < 0 || greedy_tokens < 1 || c.threads < 1) {
    return absl::InvalidArgumentError(
        "--max-tokens and --prompts must be >= 0, --greedy-tokens and --threads >= 1");
  }

  BATON_ASSIGN_OR_RETURN(LoadedModel m, load_model(c.model, c.threads));
  const ModelSpec& spec = m.spec();
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromGguf(m.model->file()));
  BATON_ASSIGN_OR_RETURN(const std::string text, read_file(text_path, "--text-file"));
  std::vector<int32_t> text_tokens = tokenize_text(*tokenizer, text, per_line);
  if (max_tokens > 0 && static_cast<int64_t>(text_tokens.size()) > max_tokens) text_tokens.resize(max_tokens);
  const bool bos = tokenizer->add_bos() && tokenizer->bos_id() >= 0;
  const std::vector<std::vector<int32_t>> chunks = cut_chunks(text_tokens, chunk, bos ? tokenizer->bos_id() : -1);
  if (chunks.empty()) return absl::InvalidArgumentError("the text has too few tokens for one chunk");

  BATON_ASSIGN_OR_RETURN(const ModelFingerprint fingerprint, model_fingerprint(*m.model));
  const KvRope rope = kv_rope_of(*m.model);
  InMemoryHandoff base;
  base.cloud = base.edge = HandoffEnd{&fingerprint, &rope};
  base.geometry = m.engine->kv_geometry();
  std::shared_ptr<const KvCalibration> calibration;
  if (!calibration_path.empty()) {
    BATON_ASSIGN_OR_RETURN(KvCalibration loaded, load_kv_calibration(calibration_path));
    if (loaded.model_digest != fingerprint.digest) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "--calibration %s is for model %s; --model %s is %s", calibration_path, loaded.model_digest, c.model,
          fingerprint.digest));
    }
    calibration = std::make_shared<const KvCalibration>(std::move(loaded));
  }
  BATON_ASSIGN_OR_RETURN(std::vector<Variant> variants, make_variants(codecs, base, calibration));
  const QualitySetup setup{m.engine.get(), spec.n_vocab, prompts, greedy_tokens};
  double f32_nll = 0.0;
  BATON_RETURN_IF_ERROR(run_chunks(setup, chunks, variants, &f32_nll));

  const KvQualityRun result = summarize(variants, f32_nll, spec, text_path, chunk, chunks.size(), bos,
                                        std::min<int64_t>(prompts, static_cast<int64_t>(chunks.size())),
                                        greedy_tokens);
  if (!plot_path.empty()) {
    KvQualityRun plotted = result;
    plotted.plot_path = plot_path;
    BATON_RETURN_IF_ERROR(write_kv_quality_plot(plotted));
  }
  if (c.json) {
    print_json_line(kv_quality_json(result));
  } else {
    print_kv_quality_table(result);
  }
  return absl::OkStatus();
}

}  // namespace baton::cli
