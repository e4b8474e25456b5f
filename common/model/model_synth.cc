#include "common/model/model_synth.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/gguf/ggml_quant.h"
#include "common/gguf/gguf_writer.h"
#include "common/model/model_metadata.h"
#include "common/util/check.h"
#include "common/util/sha256.h"
#include "common/util/thread_pool.h"

namespace baton {
namespace {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Fills `out` with approximately normal(0, std) values: Irwin-Hall sum of four
// 16-bit uniforms from one 64-bit draw, scaled to unit variance. Seeded per
// row so that the values do not depend on threading or on the stored type.
void random_row(uint64_t row_seed, float std, float* out, int64_t n) {
  uint64_t state = row_seed;
  // The sum of four U[0, 65536) has mean 131070 and std 65536/sqrt(3).
  const float scale = std * std::sqrt(3.0f) / 65536.0f;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = mix64(state++);
    const int32_t sum = static_cast<int32_t>(r & 0xffff) + static_cast<int32_t>((r >> 16) & 0xffff) +
                        static_cast<int32_t>((r >> 32) & 0xffff) + static_cast<int32_t>(r >> 48);
    out[i] = static_cast<float>(sum - 131070) * scale;
  }
}

// Llama 3.1 RoPE frequency factors (as llama.cpp's converter computes them).
std::vector<float> llama3_freq_factors(const SynthShape& s) {
  const int n_pairs = s.head_dim / 2;
  std::vector<float> factors(n_pairs);
  const double low_wavelen = s.llama3_original_ctx / s.llama3_low_freq_factor;
  const double high_wavelen = s.llama3_original_ctx / s.llama3_high_freq_factor;
  for (int i = 0; i < n_pairs; ++i) {
    const double freq = std::pow(static_cast<double>(s.rope_freq_base), -2.0 * i / s.head_dim);
    const double wavelen = 2.0 * M_PI / freq;
    double factor;
    if (wavelen < high_wavelen) {
      factor = 1.0;
    } else if (wavelen > low_wavelen) {
      factor = s.llama3_rope_factor;
    } else {
      const double smooth = (s.llama3_original_ctx / wavelen - s.llama3_low_freq_factor) /
                            (s.llama3_high_freq_factor - s.llama3_low_freq_factor);
      factor = 1.0 / ((1.0 - smooth) / s.llama3_rope_factor + smooth);
    }
    factors[i] = static_cast<float>(factor);
  }
  return factors;
}

// LongRoPE frequency divisors [n_rot/2], smooth in the pair index like the
// published ones: short from 1 to 1.5, long from 1 to the context extension.
std::vector<float> long_rope_factors(const SynthShape& s, int n_rot, bool long_set) {
  const int n_pairs = n_rot / 2;
  const double extension = static_cast<double>(s.n_ctx_train) / s.long_rope_original_ctx;
  std::vector<float> factors(n_pairs);
  for (int i = 0; i < n_pairs; ++i) {
    const double t = n_pairs > 1 ? static_cast<double>(i) / (n_pairs - 1) : 0.0;
    factors[i] = static_cast<float>(long_set ? 1.0 + (extension - 1.0) * t * t : 1.0 + 0.5 * t);
  }
  return factors;
}

// The synthetic llama-style vocabulary: <unk>, <s>, </s>, the 256 byte
// tokens, then distinct pieces over a-z (with and without the ▁ word marker).
void add_synth_tokenizer(GgufWriter& w, int n_vocab) {
  BATON_CHECK(n_vocab >= 259 + 26, "synthetic vocab needs room for specials, bytes and letters");
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  tokens.reserve(n_vocab);
  auto add = [&](std::string piece, float score, int32_t type) {
    tokens.push_back(std::move(piece));
    scores.push_back(score);
    types.push_back(type);
  };
  add("<unk>", 0.0f, 2);   // UNKNOWN
  add("<s>", 0.0f, 3);     // CONTROL
  add("</s>", 0.0f, 3);
  for (int b = 0; b < 256; ++b) add(absl::StrFormat("<0x%02X>", b), 0.0f, 6);  // BYTE
  static const char kLetters[] = "etaoinshrdlucmfwypvbgkjqxz";
  const std::string word_marker = "\xE2\x96\x81";  // U+2581
  for (int64_t index = 0; static_cast<int>(tokens.size()) < n_vocab; ++index) {
    // index -> (word, with marker?) enumerating lengths 1, 2, 3, ...
    int64_t rem = index / 2;
    int len = 1;
    int64_t count = 26;
    while (rem >= count) {
      rem -= count;
      count *= 26;
      ++len;
    }
    std::string word(len, 'a');
    for (int i = len - 1; i >= 0; --i) {
      word[i] = kLetters[rem % 26];
      rem /= 26;
    }
    if (index % 2 == 0) word = word_marker + word;
    add(std::move(word), -static_cast<float>(tokens.size()), 1);  // NORMAL
  }
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_f32_array("tokenizer.ggml.scores", scores);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
}

Digest256 synth_source_digest(const SynthShape& s, uint64_t seed) {
  Sha256 h;
  h.update_field("baton-synth-weights/1");
  h.update_field(absl::StrFormat("%s %s %d %d %d %d %d %d %d %g %g %g %d", s.name, s.arch, s.n_layer,
                                 s.n_embd, s.n_head, s.n_head_kv, s.head_dim, s.n_ff, s.n_vocab,
                                 s.rope_freq_base, s.llama3_rope_factor, s.norm_eps, s.tied_embeddings));
  if (s.sliding_window > 0) {  // gemma3 only, so the other shapes keep their digests
    h.update_field(absl::StrFormat("window %d linear %g", s.sliding_window, s.rope_linear_factor));
  }
  h.update_u64(seed);
  return h.finish();
}

// gemma3's keys beyond the common ones, named as llama.cpp reads them.
void add_gemma3_metadata(GgufWriter& w, const SynthShape& s) {
  const std::string a = s.arch + ".";
  w.set_u32(a + "attention.sliding_window", s.sliding_window);
  if (s.rope_linear_factor > 0) {
    w.set_string(a + "rope.scaling.type", "linear");
    w.set_f32(a + "rope.scaling.factor", s.rope_linear_factor);
  }
}

}  // namespace

uint32_t llama_file_type(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kQ4_0: return 2;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kBF16: return 32;
    default: break;  // not (yet) supported: handled below
  }
  return 0;
}

absl::Status synthesize_model(const SynthShape& s, const SynthOptions& options, const std::string& path) {
  if ((options.type == GgmlType::kQ4_0 || options.type == GgmlType::kQ8_0) &&
      (s.n_embd % 32 != 0 || s.n_ff % 32 != 0 || s.head_dim * s.n_head % 32 != 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shape %s has widths that are not multiples of 32; cannot store it as %s", s.name,
        ggml_type_name(options.type)));
  }
  GgufWriter w;
  const std::string a = s.arch + ".";
  w.set_string("general.architecture", s.arch);
  w.set_string("general.name", "baton-synth-" + s.name);
  w.set_u32("general.file_type", llama_file_type(options.type));
  w.set_u32("general.quantization_version", 2);
  w.set_u32(a + "context_length", s.n_ctx_train);
  w.set_u32(a + "embedding_length", s.n_embd);
  w.set_u32(a + "block_count", s.n_layer);
  w.set_u32(a + "feed_forward_length", s.n_ff);
  w.set_u32(a + "attention.head_count", s.n_head);
  w.set_u32(a + "attention.head_count_kv", s.n_head_kv);
  w.set_u32(a + "attention.key_length", s.head_dim);
  w.set_u32(a + "attention.value_length", s.head_dim);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.norm_eps);
  w.set_f32(a + "rope.freq_base", s.rope_freq_base);
  const int n_rot = s.n_rot > 0 ? s.n_rot : s.head_dim;
  w.set_u32(a + "rope.dimension_count", n_rot);
  if (s.long_rope_original_ctx > 0) {
    // What llama.cpp's converter writes for Phi-3-128k: the original context
    // and the attention factor sqrt(1 + ln(scale) / ln(original)).
    const double scale = static_cast<double>(s.n_ctx_train) / s.long_rope_original_ctx;
    w.set_u32(a + "rope.scaling.original_context_length", s.long_rope_original_ctx);
    w.set_f32(a + "rope.scaling.attn_factor",
              scale > 1.0 ? static_cast<float>(std::sqrt(1.0 + std::log(scale) / std::log(s.long_rope_original_ctx)))
                          : 1.0f);
  }
  w.set_u32(a + "vocab_size", s.n_vocab);
  const bool gemma3 = s.arch == "gemma3";
  if (gemma3) add_gemma3_metadata(w, s);
  add_synth_tokenizer(w, s.n_vocab);
  w.set_string(kSourceWeightsDigestKey, to_hex(synth_source_digest(s, options.seed)));
  w.set_string("baton.synth.shape", s.name);
  w.set_u64("baton.synth.seed", options.seed);

  auto pool = std::make_shared<ThreadPool>(resolve_thread_count(options.n_threads));
  uint64_t tensor_index = 0;
  // A matrix [rows, cols] stored as `type`, values N(0, std), one seed per row.
  auto add_matrix = [&](const std::string& name, int64_t rows, int64_t cols, GgmlType type, float std) {
    const uint64_t tensor_seed = mix64(options.seed ^ mix64(++tensor_index));
    w.add_tensor(name, type, {cols, rows}, [=](uint8_t* dst, uint64_t n_bytes) -> absl::Status {
      const int64_t row_bytes = ggml_row_bytes(type, cols);
      BATON_CHECK(static_cast<uint64_t>(row_bytes * rows) == n_bytes);
      pool->parallel_for(rows, [&](int64_t begin, int64_t end) {
        std::vector<float> row(cols);
        for (int64_t r = begin; r < end; ++r) {
          random_row(mix64(tensor_seed + static_cast<uint64_t>(r)), std, row.data(), cols);
          quantize_row(type, row.data(), dst + r * row_bytes, cols);
        }
      });
      return absl::OkStatus();
    });
  };
  auto add_vector = [&](const std::string& name, std::vector<float> values) {
    const int64_t n = static_cast<int64_t>(values.size());
    w.add_tensor_copy(name, GgmlType::kF32, {n}, values.data());
  };
  auto add_random_vector = [&](const std::string& name, int64_t n, float std, float mean = 0.0f) {
    std::vector<float> values(n);
    random_row(mix64(options.seed ^ mix64(++tensor_index)), std, values.data(), n);
    for (float& v : values) v += mean;
    add_vector(name, std::move(values));
  };
  // RMSNorm weights: ones; gemma3 stores Gemma's (1 + w) as llama.cpp's
  // converter does, with w ~ N(0, 0.1) so that a norm applied to the wrong
  // tensor, or the 1 added twice, shows in the logits.
  auto add_norm = [&](const std::string& name, int64_t n) {
    if (gemma3) {
      add_random_vector(name, n, 0.1f, 1.0f);
    } else {
      add_vector(name, std::vector<float>(n, 1.0f));
    }
  };

  const float embd_std = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
  const int64_t q_dim = int64_t{s.n_head} * s.head_dim;
  const int64_t kv_dim = int64_t{s.n_head_kv} * s.head_dim;
  add_matrix("token_embd.weight", s.n_vocab, s.n_embd, options.type, embd_std);
  add_norm("output_norm.weight", s.n_embd);
  if (!s.tied_embeddings) add_matrix("output.weight", s.n_vocab, s.n_embd, options.type, embd_std);
  if (s.llama3_rope_factor > 0) add_vector("rope_freqs.weight", llama3_freq_factors(s));
  if (s.long_rope_original_ctx > 0) {
    add_vector("rope_factors_long.weight", long_rope_factors(s, n_rot, true));
    add_vector("rope_factors_short.weight", long_rope_factors(s, n_rot, false));
  }
  const bool qkv_bias = s.arch == "qwen2";
  const bool qk_norm = s.arch == "qwen3";
  const bool fused = s.arch == "phi3";  // attn_qkv and gate|up in ffn_up
  // QK-norm weights around 1 (not all 1, so that a missed weight shows).
  auto add_norm_weights = [&](const std::string& name, int64_t n) { add_random_vector(name, n, 0.2f, 1.0f); };
  for (int i = 0; i < s.n_layer; ++i) {
    const std::string b = absl::StrFormat("blk.%d.", i);
    add_norm(b + "attn_norm.weight", s.n_embd);
    if (fused) {
      add_matrix(b + "attn_qkv.weight", q_dim + 2 * kv_dim, s.n_embd, options.type, embd_std);
    } else {
      add_matrix(b + "attn_q.weight", q_dim, s.n_embd, options.type, embd_std);
      add_matrix(b + "attn_k.weight", kv_dim, s.n_embd, options.type, embd_std);
      add_matrix(b + "attn_v.weight", kv_dim, s.n_embd, options.type, embd_std);
    }
    if (qkv_bias) {
      add_random_vector(b + "attn_q.bias", q_dim, 0.1f);
      add_random_vector(b + "attn_k.bias", kv_dim, 0.1f);
      add_random_vector(b + "attn_v.bias", kv_dim, 0.1f);
    }
    if (gemma3) {
      add_norm(b + "attn_q_norm.weight", s.head_dim);
      add_norm(b + "attn_k_norm.weight", s.head_dim);
    } else if (qk_norm) {
      add_norm_weights(b + "attn_q_norm.weight", s.head_dim);
      add_norm_weights(b + "attn_k_norm.weight", s.head_dim);
    }
    add_matrix(b + "attn_output.weight", s.n_embd, q_dim, options.type,
               1.0f / std::sqrt(static_cast<float>(q_dim)));
    if (gemma3) add_norm(b + "post_attention_norm.weight", s.n_embd);
    add_norm(b + "ffn_norm.weight", s.n_embd);
    if (fused) {
      add_matrix(b + "ffn_up.weight", 2 * int64_t{s.n_ff}, s.n_embd, options.type, embd_std);
    } else {
      add_matrix(b + "ffn_gate.weight", s.n_ff, s.n_embd, options.type, embd_std);
      add_matrix(b + "ffn_up.weight", s.n_ff, s.n_embd, options.type, embd_std);
    }
    add_matrix(b + "ffn_down.weight", s.n_embd, s.n_ff, options.type,
               1.0f / std::sqrt(static_cast<float>(s.n_ff)));
    if (gemma3) add_norm(b + "post_ffw_norm.weight", s.n_embd);
  }
  return w.write(path);
}

}  // namespace baton
