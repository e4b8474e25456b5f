// baton bench kv-codec: the KV codec on a model's real K/V. Prefills N tokens
// with the CPU engine into an F32 cache, then encodes and decodes every
// layer's K and V per codec variant in blocks, one thread, and reports bytes
// per token (raw and after zstd), the ratio to F16, encode / decode MB/s of
// F16-equivalent bytes (thread CPU time), and the reconstruction error
// against the F32 K/V (overall, and relative per kind: keys and values may
// differ in bits and group, e.g. int4-k8, int4-pc-kg128).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench_commands.h"
#include "common/cpu/ops.h"
#include "common/engine/engine.h"
#include "common/engine/f32_kv_cache.h"
#include "common/engine/sampler.h"
#include "common/kv/kv_codec.h"
#include "common/model/model.h"
#include "common/util/cpu_features.h"
#include "common/util/flags.h"
#include "kv_codec_list.h"
#include "report.h"

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

std::string default_codecs(int head_dim) { return expand_codec_list(kDefaultCodecs, head_dim); }

// One layer's K or V over the prompt: f32 [n_tokens, kv_dim].
struct KvTensor {
  int layer;
  bool is_key;
  std::vector<float> post_rope;  // as the engine attends over it (keys post-RoPE)
  std::vector<float> pre_rope;   // keys only: RoPE undone
};

struct VariantResult {
  std::string codec;
  double raw_bytes_per_token = 0, encoded_bytes_per_token = 0, ratio_to_f16 = 0;
  double encode_mb_per_s = 0, decode_mb_per_s = 0;
  double rmse = 0, relative_rmse = 0;  // decoded vs F32, and / RMS of the F32 K/V
  double key_relative_rmse = 0, value_relative_rmse = 0;  // the same over K only, V only
  std::string error;                   // non-empty: variant not valid for the model
};

// Encodes and decodes every tensor in blocks of block_tokens; best of the
// timed repetitions (at least 3 and at least ~0.2 s of each).
VariantResult run_variant(const KvCodecConfig& c, const KvGeometry& g, const std::vector<KvTensor>& tensors,
                          int64_t n_tokens, int64_t block_tokens, const ModelSpec& spec,
                          const std::vector<float>& inv_freq) {
  VariantResult r;
  r.codec = c.to_string();
  if (absl::Status st = c.validate(g); !st.ok()) {
    r.error = std::string(st.message());
    return r;
  }
  const int64_t kv_dim = g.kv_dim();
  std::vector<std::vector<EncodedKvBlock>> encoded(tensors.size());
  double best_encode = 1e30, best_decode = 1e30, total_encode = 0, total_decode = 0;
  uint64_t raw_bytes = 0, encoded_bytes = 0;
  double err_sq = 0, ref_sq = 0;
  double kind_err_sq[2] = {0, 0}, kind_ref_sq[2] = {0, 0};  // [0] keys, [1] values
  std::vector<float> out(static_cast<size_t>(block_tokens * kv_dim));
  for (int rep = 0; rep < 3 || (rep < 1000 && (total_encode < 0.2 || total_decode < 0.2)); ++rep) {
    const double encode_start = thread_cpu_seconds();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const KvTensor& t = tensors[i];
      const std::vector<float>& input = (t.is_key && c.pre_rope_keys) ? t.pre_rope : t.post_rope;
      encoded[i].clear();
      for (int64_t b = 0; b < n_tokens; b += block_tokens) {
        const int64_t n = std::min(block_tokens, n_tokens - b);
        auto enc = encode_kv_block(c, g, t.is_key, input.data() + b * kv_dim, n);
        if (!enc.ok()) {
          r.error = std::string(enc.status().message());
          return r;
        }
        encoded[i].push_back(std::move(*enc));
      }
    }
    const double encode_s = thread_cpu_seconds() - encode_start;
    const double decode_start = thread_cpu_seconds();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const KvTensor& t = tensors[i];
      for (size_t bi = 0; bi < encoded[i].size(); ++bi) {
        const int64_t b = static_cast<int64_t>(bi) * block_tokens;
        const int64_t n = std::min(block_tokens, n_tokens - b);
        const KvRopeParams rope{inv_freq.data(), spec.rope.n_rot, spec.rope.type == RopeType::kNeox, b};
        absl::Status st = decode_kv_block(c, g, t.is_key, encoded[i][bi].payload, encoded[i][bi].raw_size, n,
                                          out.data(), &rope);
        if (!st.ok()) {
          r.error = std::string(st.message());
          return r;
        }
        if (rep == 0) {
          const float* ref = t.post_rope.data() + b * kv_dim;
          double block_err_sq = 0, block_ref_sq = 0;
          for (int64_t e = 0; e < n * kv_dim; ++e) {
            const double d = double{out[e]} - ref[e];
            block_err_sq += d * d;
            block_ref_sq += double{ref[e]} * ref[e];
          }
          err_sq += block_err_sq;
          ref_sq += block_ref_sq;
          kind_err_sq[t.is_key ? 0 : 1] += block_err_sq;
          kind_ref_sq[t.is_key ? 0 : 1] += block_ref_sq;
          raw_bytes += encoded[i][bi].raw_size;
          encoded_bytes += encoded[i][bi].payload.size();
        }
      }
    }
    const double decode_s = thread_cpu_seconds() - decode_start;
    best_encode = std::min(best_encode, encode_s);
    best_decode = std::min(best_decode, decode_s);
    total_encode += encode_s;
    total_decode += decode_s;
  }
  const double elements = static_cast<double>(tensors.size()) * n_tokens * kv_dim;
  const double f16_bytes = 2.0 * elements;
  r.raw_bytes_per_token = static_cast<double>(raw_bytes) / n_tokens;
  r.encoded_bytes_per_token = static_cast<double>(encoded_bytes) / n_tokens;
  r.ratio_to_f16 = static_cast<double>(encoded_bytes) / f16_bytes;
  r.encode_mb_per_s = f16_bytes / best_encode / 1e6;
  r.decode_mb_per_s = f16_bytes / best_decode / 1e6;
  r.rmse = std::sqrt(err_sq / elements);
  r.relative_rmse = ref_sq > 0 ? std::sqrt(err_sq / ref_sq) : 0.0;
  r.key_relative_rmse = kind_ref_sq[0] > 0 ? std::sqrt(kind_err_sq[0] / kind_ref_sq[0]) : 0.0;
  r.value_relative_rmse = kind_ref_sq[1] > 0 ? std::sqrt(kind_err_sq[1] / kind_ref_sq[1]) : 0.0;
  return r;
}

}  // namespace

int bench_kv_codec(const std::vector<std::string>& args) {
  std::string model_path, codecs, token_ids;
  int64_t tokens = 512, threads = 2, block_tokens = 256;
  bool json = false;
  FlagSet flags("baton bench kv-codec", "--model FILE [--tokens N] [--codecs LIST] [--json]",
                "KV codec on the model's own K/V: prefills N tokens (synthetic ids unless --token-ids), "
                "then per codec variant encodes and decodes every layer's K and V in blocks on one "
                "thread. Reports bytes per token (raw quantized and after zstd), the ratio to F16, encode "
                "and decode MB/s of F16-equivalent bytes, and the RMSE against the F32 K/V (absolute and "
                "relative to the K/V's RMS, also per K and V).");
  flags.add_string("model", &model_path, "GGUF model file", "FILE");
  flags.add_int64("tokens", &tokens, "prompt tokens to prefill");
  flags.add_string("token-ids", &token_ids, "comma-separated prompt token ids (overrides --tokens)", "LIST");
  flags.add_string("codecs", &codecs,
                   "comma-separated codec names (see common/kv/kv_codec_config.h); default: a set of "
                   "f16/int8/int4 variants with groups of min(32, head_dim)",
                   "LIST");
  flags.add_int64("block", &block_tokens, "tokens per encoded block");
  flags.add_int64("threads", &threads, "prefill threads (the codec runs on one)");
  flags.add_bool("json", &json, "print one JSON object instead of the table");
  flags.require("model");
  if (auto code = bench_parse_flags(flags, args)) return *code;
  if (block_tokens < 1 || block_tokens > kMaxKvBlockTokens) return bench_fail("--block must be in [1, 1048576]");

  auto model = Model::Load(model_path);
  if (!model.ok()) return bench_fail(std::string(model.status().message()));
  const ModelSpec& s = (*model)->spec();
  if (codecs.empty()) codecs = default_codecs(s.head_dim);
  std::vector<KvCodecConfig> configs;
  const std::vector<std::string> names = absl::StrSplit(codecs, ',', absl::SkipEmpty());
  for (const std::string& name : names) {
    auto c = parse_kv_codec_config(name);
    if (!c.ok()) return bench_fail(std::string(c.status().message()));
    configs.push_back(*c);
  }
  std::vector<int32_t> prompt;
  if (!token_ids.empty()) {
    const std::vector<std::string> ids = absl::StrSplit(token_ids, ',', absl::SkipEmpty());
    for (const std::string& id : ids) {
      int32_t value = 0;
      if (!absl::SimpleAtoi(id, &value)) return bench_fail("bad token id '" + id + "' in --token-ids");
      prompt.push_back(value);
    }
  } else {
    if (tokens < 1) return bench_fail("--tokens must be >= 1");
    Rng rng(1);
    prompt.resize(static_cast<size_t>(tokens));
    for (auto& t : prompt) t = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(s.n_vocab));
  }
  const int64_t n_tokens = static_cast<int64_t>(prompt.size());

  Engine engine(**model, EngineOptions{static_cast<int>(threads), 64});
  const KvGeometry g = engine.kv_geometry();
  F32KvCache cache(g, n_tokens);
  if (absl::Status st = engine.prefill(prompt, cache, nullptr); !st.ok()) return bench_fail(std::string(st.message()));

  // Pre-RoPE keys: rotate by -theta (RoPE with negated frequencies).
  std::vector<float> inverse_freq = (*model)->rope_inv_freq();
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

  std::vector<VariantResult> results;
  for (const KvCodecConfig& c : configs) {
    results.push_back(run_variant(c, g, tensors, n_tokens, block_tokens, s, (*model)->rope_inv_freq()));
  }

  const double f16_bytes_per_token = 2.0 * static_cast<double>(s.kv_elements_per_token());
  const std::string title =
      absl::StrFormat("kv-codec: %s, %d tokens, blocks of %d, %s kernels, one thread (CPU time)", s.name, n_tokens,
                      block_tokens, simd_level_name(active_simd_level()));
  if (json) {
    std::string out = absl::StrFormat(
        "{\"model\": \"%s\", \"tokens\": %d, \"block_tokens\": %d, \"simd\": \"%s\", \"f16_bytes_per_token\": %.1f, "
        "\"variants\": [",
        json_escape(s.name), n_tokens, block_tokens, simd_level_name(active_simd_level()), f16_bytes_per_token);
    for (size_t i = 0; i < results.size(); ++i) {
      const VariantResult& r = results[i];
      if (i > 0) out += ", ";
      if (!r.error.empty()) {
        out += absl::StrFormat("{\"codec\": \"%s\", \"error\": \"%s\"}", json_escape(r.codec), json_escape(r.error));
        continue;
      }
      out += absl::StrFormat(
          "{\"codec\": \"%s\", \"raw_bytes_per_token\": %.1f, \"encoded_bytes_per_token\": %.1f, "
          "\"ratio_to_f16\": %.4f, \"encode_mb_per_s\": %.1f, \"decode_mb_per_s\": %.1f, \"rmse\": %.6g, "
          "\"relative_rmse\": %.6g, \"key_relative_rmse\": %.6g, \"value_relative_rmse\": %.6g}",
          json_escape(r.codec), r.raw_bytes_per_token, r.encoded_bytes_per_token, r.ratio_to_f16, r.encode_mb_per_s,
          r.decode_mb_per_s, r.rmse, r.relative_rmse, r.key_relative_rmse, r.value_relative_rmse);
    }
    out += "]}\n";
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  std::printf("%s\nF16 K/V: %.0f bytes per token\n", title.c_str(), f16_bytes_per_token);
  std::printf("  %-24s %10s %10s %8s %10s %10s %10s %9s %9s %9s\n", "codec", "raw B/tok", "enc B/tok", "vs f16",
              "enc MB/s", "dec MB/s", "rmse", "rel rmse", "K rel", "V rel");
  for (const VariantResult& r : results) {
    if (!r.error.empty()) {
      std::printf("  %-24s skipped: %s\n", r.codec.c_str(), r.error.c_str());
      continue;
    }
    std::printf("  %-24s %10.1f %10.1f %8.4f %10.1f %10.1f %10.3g %9.4f %9.4f %9.4f\n", r.codec.c_str(),
                r.raw_bytes_per_token, r.encoded_bytes_per_token, r.ratio_to_f16, r.encode_mb_per_s,
                r.decode_mb_per_s, r.rmse, r.relative_rmse, r.key_relative_rmse, r.value_relative_rmse);
  }
  return 0;
}

}  // namespace baton::cli
