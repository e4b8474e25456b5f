// baton bench kv-codec: the KV codec on a model's real K/V. Prefills N tokens
// with the CPU engine into an F32 cache, then encodes and decodes every
// layer's K and V per codec variant in blocks, one thread, and reports bytes
// per token (raw and after zstd), the ratio to F16, encode / decode MB/s of
// F16-equivalent bytes (thread CPU time), and the reconstruction error
// against the F32 K/V (overall, and relative per kind: keys and values may
// differ in bits and group, e.g. int4-k8, int4-pc-kg128). Output:
// bench_kv_codec_report.cc.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench_harness.h"
#include "bench_kv_codec.h"
#include "common/cpu/ops.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/kv_codec/kv_codec.h"
#include "common/kv_codec/kv_transform_codec.h"
#include "common/util/check.h"
#include "common/util/cpu_features.h"
#include "kv_codec_list.h"

namespace baton::cli {
namespace {

// The codec's speed is the CPU time of the one thread that runs it, so a
// busy machine does not lower the figures (wall time would).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Default variants; "G" stands for the group size min(32, head_dim), "G2"
// for twice that (variants whose group does not divide head_dim are skipped).
constexpr char kDefaultCodecs[] =
    "f16,f16-z3,f16-rows-z3,"
    "int8-gG,int8-gG-z3,int8-gG-rows-z3,int8-pc-gG-z3,int8-gG-had-z3,int8-gG-pre-z3,"
    "int4-gG,int4-gG-z1,int4-gG-z3,int4-gG-z9,int4-gG-rows-z3,int4-pc-gG-z3,int4-pc-gG-rows-z3,"
    "int4-gG-had-z3,int4-pc-gG-had-z3,int4-gG-pre-z3,int4-pc-gG-pre-z3,int4-gG-pre-had-z3,"
    "int4-gG2-z3,int4-gG2-had-z3,int4-pc-gG2-z3,int4-k8-gG-z3,int4-pc-kg128-gG-z3";

// One layer's K or V over the prompt: f32 [n_tokens, kv_dim].
struct KvTensor {
  int layer;
  bool is_key;
  std::vector<float> post_rope;  // as the engine attends over it (keys post-RoPE)
  std::vector<float> pre_rope;   // keys only: RoPE undone
};

// What every variant of a run works on.
struct CodecInput {
  KvGeometry geometry;
  std::vector<KvTensor> tensors;
  int64_t n_tokens = 0;
  int64_t block_tokens = 0;
  const ModelSpec* spec = nullptr;
  std::vector<float> inv_freq;  // the model's RoPE frequencies
};

// Sums of squares of the reconstruction error and of the reference, overall
// and per kind ([0] keys, [1] values), with the byte counts.
struct ErrorSums {
  double err_sq = 0, ref_sq = 0;
  double kind_err_sq[2] = {0, 0}, kind_ref_sq[2] = {0, 0};
  uint64_t raw_bytes = 0, encoded_bytes = 0;
};

// Encodes every tensor in blocks of block_tokens into `encoded`.
absl::Status encode_all(const KvCodecConfig& c, const KvTransformCodec* coder, const CodecInput& in,
                        std::vector<std::vector<EncodedKvBlock>>& encoded) {
  const int64_t kv_dim = in.geometry.kv_dim();
  for (size_t i = 0; i < in.tensors.size(); ++i) {
    const KvTensor& t = in.tensors[i];
    const std::vector<float>& input = (t.is_key && c.pre_rope_keys) ? t.pre_rope : t.post_rope;
    encoded[i].clear();
    for (int64_t b = 0; b < in.n_tokens; b += in.block_tokens) {
      const int64_t n = std::min(in.block_tokens, in.n_tokens - b);
      absl::StatusOr<EncodedKvBlock> block =
          coder != nullptr ? coder->encode(t.layer, t.is_key, b, in.n_tokens, input.data() + b * kv_dim, n)
                           : encode_kv_block(c, in.geometry, t.is_key, input.data() + b * kv_dim, n);
      if (!block.ok()) return block.status();
      encoded[i].push_back(std::move(*block));
    }
  }
  return absl::OkStatus();
}

// Decodes every block of `encoded`; with `sums`, adds the error against the
// post-RoPE F32 K/V and the byte counts.
absl::Status decode_all(const KvCodecConfig& c, const KvTransformCodec* coder, const CodecInput& in,
                        const std::vector<std::vector<EncodedKvBlock>>& encoded, std::vector<float>& out,
                        ErrorSums* sums) {
  const int64_t kv_dim = in.geometry.kv_dim();
  // The transform codec's receiver rotates every layer's keys with one table
  // per segment (kv_handoff.cc); it is part of the decode time.
  const RopeTable rope_table =
      coder != nullptr ? make_rope_table(0, in.n_tokens, in.spec->rope.n_rot, in.inv_freq.data()) : RopeTable{};
  for (size_t i = 0; i < in.tensors.size(); ++i) {
    const KvTensor& t = in.tensors[i];
    for (size_t bi = 0; bi < encoded[i].size(); ++bi) {
      const int64_t b = static_cast<int64_t>(bi) * in.block_tokens;
      const int64_t n = std::min(in.block_tokens, in.n_tokens - b);
      const KvRopeParams rope{in.inv_freq.data(), in.spec->rope.n_rot, in.spec->rope.type == RopeType::kNeox, b};
      if (coder != nullptr) {  // the transform codec, keys rotated as decode_kv_block does for "pre"
        BATON_RETURN_IF_ERROR(coder->decode(t.layer, t.is_key, b, in.n_tokens, encoded[i][bi].payload,
                                            encoded[i][bi].raw_size, n, out.data()));
        if (t.is_key) rope_rows_table(out.data(), n, in.geometry.n_head_kv, in.geometry.head_dim, rope.neox, b, rope_table);
      } else {
        BATON_RETURN_IF_ERROR(decode_kv_block(c, in.geometry, t.is_key, encoded[i][bi].payload,
                                              encoded[i][bi].raw_size, n, out.data(), &rope));
      }
      if (sums == nullptr) continue;
      const float* ref = t.post_rope.data() + b * kv_dim;
      double block_err_sq = 0, block_ref_sq = 0;
      for (int64_t e = 0; e < n * kv_dim; ++e) {
        const double d = double{out[e]} - ref[e];
        block_err_sq += d * d;
        block_ref_sq += double{ref[e]} * ref[e];
      }
      sums->err_sq += block_err_sq;
      sums->ref_sq += block_ref_sq;
      sums->kind_err_sq[t.is_key ? 0 : 1] += block_err_sq;
      sums->kind_ref_sq[t.is_key ? 0 : 1] += block_ref_sq;
      sums->raw_bytes += encoded[i][bi].raw_size;
      sums->encoded_bytes += encoded[i][bi].payload.size();
    }
  }
  return absl::OkStatus();
}

// Encodes and decodes every tensor in blocks of block_tokens; best of the
// timed repetitions (at least 3 and at least ~0.2 s of each).
VariantResult run_variant(const KvCodecConfig& c, const CodecInput& in,
                          const std::shared_ptr<const KvCalibration>& calibration) {
  VariantResult r;
  r.codec = c.to_string();
  std::unique_ptr<KvTransformCodec> coder;
  if (c.transform) {
    if (calibration == nullptr) {
      r.error = "the transform codec needs --calibration FILE (baton model calibrate)";
      return r;
    }
    absl::StatusOr<std::unique_ptr<KvTransformCodec>> made = KvTransformCodec::Create(calibration, c);
    if (made.ok()) {
      if (absl::Status st = calibration->check_geometry(in.geometry); !st.ok()) made = st;
    }
    if (!made.ok()) {
      r.error = std::string(made.status().message());
      return r;
    }
    coder = std::move(*made);
  }
  std::vector<std::vector<EncodedKvBlock>> encoded(in.tensors.size());
  double best_encode = 1e30, best_decode = 1e30, total_encode = 0, total_decode = 0;
  ErrorSums sums;
  std::vector<float> out(static_cast<size_t>(in.block_tokens * in.geometry.kv_dim()));
  absl::Status st = c.validate(in.geometry);
  for (int rep = 0; st.ok() && (rep < 3 || (rep < 1000 && (total_encode < 0.2 || total_decode < 0.2))); ++rep) {
    const double encode_start = thread_cpu_seconds();
    st = encode_all(c, coder.get(), in, encoded);
    const double encode_s = thread_cpu_seconds() - encode_start;
    const double decode_start = thread_cpu_seconds();
    if (st.ok()) st = decode_all(c, coder.get(), in, encoded, out, rep == 0 ? &sums : nullptr);
    const double decode_s = thread_cpu_seconds() - decode_start;
    best_encode = std::min(best_encode, encode_s);
    best_decode = std::min(best_decode, decode_s);
    total_encode += encode_s;
    total_decode += decode_s;
  }
  if (!st.ok()) {
    r.error = std::string(st.message());
    return r;
  }
  const double elements = static_cast<double>(in.tensors.size()) * in.n_tokens * in.geometry.kv_dim();
  const double f16_bytes = 2.0 * elements;
  r.raw_bytes_per_token = static_cast<double>(sums.raw_bytes) / in.n_tokens;
  r.encoded_bytes_per_token = static_cast<double>(sums.encoded_bytes) / in.n_tokens;
  r.ratio_to_f16 = static_cast<double>(sums.encoded_bytes) / f16_bytes;
  r.encode_mb_per_s = f16_bytes / best_encode / 1e6;
  r.decode_mb_per_s = f16_bytes / best_decode / 1e6;
  r.rmse = std::sqrt(sums.err_sq / elements);
  r.relative_rmse = sums.ref_sq > 0 ? std::sqrt(sums.err_sq / sums.ref_sq) : 0.0;
  r.key_relative_rmse = sums.kind_ref_sq[0] > 0 ? std::sqrt(sums.kind_err_sq[0] / sums.kind_ref_sq[0]) : 0.0;
  r.value_relative_rmse = sums.kind_ref_sq[1] > 0 ? std::sqrt(sums.kind_err_sq[1] / sums.kind_ref_sq[1]) : 0.0;
  return r;
}

// The K and V of every layer from `cache`, keys also with RoPE undone
// (rotated by -theta: RoPE with negated frequencies).
std::vector<KvTensor> kv_tensors(const F32KvCache& cache, const Model& model, int64_t n_tokens) {
  const KvGeometry& g = cache.geometry();
  const ModelSpec& s = model.spec();
  std::vector<float> inverse_freq = model.rope_inv_freq();
  for (float& f : inverse_freq) f = -f;
  std::vector<KvTensor> tensors;
  for (int layer = 0; layer < g.n_layer; ++layer) {
    for (bool is_key : {true, false}) {
      KvTensor t{layer, is_key, {}, {}};
      t.post_rope.resize(static_cast<size_t>(n_tokens * g.kv_dim()));
      for (int64_t i = 0; i < n_tokens; ++i) {
        const float* row = is_key ? cache.k_row(layer, i) : cache.v_row(layer, i);
        std::copy(row, row + g.kv_dim(), t.post_rope.begin() + i * g.kv_dim());
      }
      if (is_key) {
        t.pre_rope = t.post_rope;
        rope_rows(t.pre_rope.data(), n_tokens, g.n_head_kv, g.head_dim, s.rope.n_rot,
                  s.rope.type == RopeType::kNeox, 0, inverse_freq.data());
      }
      tensors.push_back(std::move(t));
    }
  }
  return tensors;
}

// The prompt: --token-ids, else `tokens` synthetic ids.
absl::StatusOr<std::vector<int32_t>> codec_prompt(const std::string& token_ids, int64_t tokens, int n_vocab) {
  if (token_ids.empty()) {
    if (tokens < 1) return absl::InvalidArgumentError("--tokens must be >= 1");
    return synthetic_tokens(tokens, n_vocab, 1);
  }
  std::vector<int32_t> prompt;
  for (const std::string& id : std::vector<std::string>(absl::StrSplit(token_ids, ',', absl::SkipEmpty()))) {
    int32_t value = 0;
    if (!absl::SimpleAtoi(id, &value)) return absl::InvalidArgumentError("bad token id '" + id + "' in --token-ids");
    prompt.push_back(value);
  }
  return prompt;
}

}  // namespace

absl::Status bench_kv_codec(const Args& args) {
  ModelBenchFlags c;
  std::string codecs, token_ids, calibration_path;
  int64_t tokens = 512, block_tokens = 256;
  FlagSet flags("baton bench kv-codec", "--model FILE [--tokens N] [--codecs LIST] [--json]",
                "KV codec on the model's own K/V: prefills N tokens (synthetic ids unless --token-ids), "
                "then per codec variant encodes and decodes every layer's K and V in blocks on one "
                "thread. Reports bytes per token (raw quantized and after zstd), the ratio to F16, encode "
                "and decode MB/s of F16-equivalent bytes, and the RMSE against the F32 K/V (absolute and "
                "relative to the K/V's RMS, also per K and V).");
  flags.add_string("model", &c.model, "GGUF model file", "FILE");
  flags.add_int64("tokens", &tokens, "prompt tokens to prefill");
  flags.add_string("token-ids", &token_ids, "comma-separated prompt token ids (overrides --tokens)", "LIST");
  flags.add_string("codecs", &codecs,
                   "comma-separated codec names (see common/kv_codec/kv_codec_config.h); default: a set of "
                   "f16/int8/int4 variants with groups of min(32, head_dim)",
                   "LIST");
  flags.add_int64("block", &block_tokens, "tokens per encoded block");
  flags.add_string("calibration", &calibration_path,
                   "the model's KV calibration (baton model calibrate) for transform codecs (tc-bB.B)", "FILE");
  flags.add_int64("threads", &c.threads, "prefill threads (the codec runs on one)");
  flags.add_bool("json", &c.json, "print one JSON object instead of the table");
  flags.require("model");
  BATON_ASSIGN_OR_RETURN(const bool run, parse_bench_flags(flags, args));
  if (!run) return absl::OkStatus();
  if (block_tokens < 1 || block_tokens > kMaxKvBlockTokens) {
    return absl::InvalidArgumentError("--block must be in [1, 1048576]");
  }
  BATON_ASSIGN_OR_RETURN(LoadedModel m, load_model(c.model, c.threads));
  const ModelSpec& s = m.spec();
  if (codecs.empty()) codecs = expand_codec_list(kDefaultCodecs, s.head_dim);
  std::vector<KvCodecConfig> configs;
  for (const std::string& name : std::vector<std::string>(absl::StrSplit(codecs, ',', absl::SkipEmpty()))) {
    BATON_ASSIGN_OR_RETURN(KvCodecConfig config, parse_kv_codec_config(name));
    configs.push_back(config);
  }
  BATON_ASSIGN_OR_RETURN(const std::vector<int32_t> prompt, codec_prompt(token_ids, tokens, s.n_vocab));
  const int64_t n_tokens = static_cast<int64_t>(prompt.size());
  CodecInput input;
  input.geometry = m.engine->kv_geometry();
  F32KvCache cache(input.geometry, n_tokens);
  BATON_RETURN_IF_ERROR(m.engine->prefill(prompt, cache, nullptr));
  input.tensors = kv_tensors(cache, *m.model, n_tokens);
  input.n_tokens = n_tokens;
  input.block_tokens = block_tokens;
  input.spec = &s;
  input.inv_freq = m.model->rope_inv_freq();

  KvCodecRun result{s.name, n_tokens, block_tokens, simd_level_name(active_simd_level()),
                    2.0 * static_cast<double>(s.kv_elements_per_token()), {}};
  std::shared_ptr<const KvCalibration> calibration;
  if (!calibration_path.empty()) {
    BATON_ASSIGN_OR_RETURN(KvCalibration loaded, load_kv_calibration(calibration_path));
    calibration = std::make_shared<const KvCalibration>(std::move(loaded));
  }
  for (const KvCodecConfig& config : configs) result.variants.push_back(run_variant(config, input, calibration));
  if (c.json) {
    print_json_line(kv_codec_json(result));
  } else {
    print_kv_codec_table(result);
  }
  return absl::OkStatus();
}

}  // namespace baton::cli
