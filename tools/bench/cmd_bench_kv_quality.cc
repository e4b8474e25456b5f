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
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench_commands.h"
#include "common/engine/engine.h"
#include "common/engine/f32_kv_cache.h"
#include "common/engine/perplexity.h"
#include "common/kv/kv_codec_config.h"
#include "common/kv/kv_handoff.h"
#include "common/kv/prefix_digest.h"
#include "common/kv/quantized_kv_cache.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/check.h"
#include "common/util/flags.h"
#include "kv_codec_list.h"
#include "logit_math.h"
#include "report.h"

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
    "int4-gG2-z3,int4-gG2-had-z3,int4-k8-gG-z3,int4-pc-kg64-gG-z3,int4-pc-kg128-gG-z3";

std::string default_codecs(int head_dim) { return expand_codec_list(kDefaultCodecs, head_dim); }

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

struct Variant {
  KvCodecConfig wire;
  KvCodecConfig store;
  std::string error;  // non-empty: not valid for this model
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

// What every handoff of the run shares.
struct Setup {
  Engine* engine;
  ModelFingerprint fingerprint;
  KvRope rope;
  KvGeometry geometry;
};

// The handoff of tokens [0, tokens.size()) whose KV `cloud` holds: written
// with `wire`, read into a fresh edge store of `capacity` tokens.
absl::StatusOr<std::unique_ptr<QuantizedKvCache>> hand_off(const Setup& s, const F32KvCache& cloud,
                                                           std::span<const int32_t> tokens, const Variant& v,
                                                           int64_t capacity, KvSegmentLoad* load) {
  KvStreamHeaderInfo info;
  info.model = s.fingerprint;
  info.codec = v.wire;
  info.first_position = 0;
  info.token_ids.assign(tokens.begin(), tokens.end());
  info.prefix_digest = prefix_digest(tokens);
  std::vector<v1::KvStreamMessage> messages;
  KvStreamWriter writer([&](const v1::KvStreamMessage& m) {
    messages.push_back(m);
    return absl::OkStatus();
  });
  BATON_RETURN_IF_ERROR(write_kv_segment(cloud, info, &s.rope, writer));

  BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> edge,
                         QuantizedKvCache::Create(s.geometry, capacity, v.store));
  KvStreamExpectation expected;
  expected.model = s.fingerprint;
  expected.first_position = 0;
  expected.token_ids = info.token_ids;
  expected.prefix_digest = info.prefix_digest;
  expected.codec = messages.front().header().codec();
  BATON_ASSIGN_OR_RETURN(*load, read_kv_segment(messages, expected, &s.rope, *edge));
  return edge;
}

// Greedy tokens after the handoff of prompt [0, P - 1): the edge runs token
// P - 1, then decodes.
absl::StatusOr<std::vector<int32_t>> greedy_after_handoff(const Setup& s, const F32KvCache& cloud,
                                                          std::span<const int32_t> prompt, const Variant& v,
                                                          int64_t n_greedy) {
  const int64_t p = static_cast<int64_t>(prompt.size());
  KvSegmentLoad load;
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> edge,
                         hand_off(s, cloud, prompt.first(p - 1), v, p + n_greedy, &load));
  std::vector<float> logits;
  BATON_RETURN_IF_ERROR(s.engine->prefill(prompt.subspan(p - 1), *edge, &logits));
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < n_greedy; ++i) {
    tokens.push_back(argmax(logits));
    if (i + 1 < n_greedy) BATON_RETURN_IF_ERROR(s.engine->decode_step(tokens.back(), *edge, &logits));
  }
  return tokens;
}

// Tokens of the text: each non-empty line on its own, concatenated (no
// newline tokens), or the whole text at once.
std::vector<int32_t> tokenize_text(const Tokenizer& tokenizer, const std::string& text, bool per_line) {
  EncodeOptions options;
  options.add_bos = false;
  options.add_eos = false;
  if (!per_line) return tokenizer.encode(text, options);
  std::vector<int32_t> tokens;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::vector<int32_t> ids = tokenizer.encode(line, options);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  }
  return tokens;
}

}  // namespace

int bench_kv_quality(const std::vector<std::string>& args) {
  std::string model_path, text_path, codecs;
  int64_t chunk = 256, max_tokens = 0, prompts = 4, greedy_tokens = 128, threads = 2;
  bool json = false, per_line = true;
  FlagSet flags("baton bench kv-quality",
                "--model FILE --text-file FILE [--chunk 256] [--max-tokens N] [--codecs LIST] [--json]",
                "KV codec quality through the cloud/edge handoff. Per chunk of held-out text, the KV of the "
                "first half goes over the wire with each codec into the edge store that codec implies; the "
                "second half is evaluated teacher-forced on top of it. Reports, against the F16 handoff: "
                "perplexity of the second halves and its change, mean KL divergence of the next-token "
                "distributions, greedy-token agreement after a few prompts, and wire bytes per token after "
                "zstd with the ratio to raw F16.");
  flags.add_string("model", &model_path, "GGUF model file (with tokenizer metadata)", "FILE");
  flags.add_string("text-file", &text_path, "held-out text to score", "FILE");
  flags.add_int64("chunk", &chunk, "tokens per chunk, BOS included (first half sent, second half scored)");
  flags.add_int64("max-tokens", &max_tokens, "use at most this many text tokens (0: all)");
  flags.add_string("codecs", &codecs,
                   "comma-separated wire codecs (common/kv/kv_codec_config.h); default: f16/int8/int4 "
                   "variants with groups of min(32, head_dim); the f16 baseline always runs",
                   "LIST");
  flags.add_int64("prompts", &prompts, "chunks whose first half prompts the greedy comparison");
  flags.add_int64("greedy-tokens", &greedy_tokens, "greedy tokens per prompt");
  flags.add_int64("threads", &threads, "engine threads");
  flags.add_bool("per-line", &per_line,
                 "tokenize each line on its own and concatenate without newlines (the bundled tiny model's "
                 "held-out recipe); --no-per-line tokenizes the text whole");
  flags.add_bool("json", &json, "print one JSON object instead of the table");
  flags.require("model");
  flags.require("text-file");
  if (auto code = bench_parse_flags(flags, args)) return *code;
  if (chunk < 4) return bench_fail("--chunk must be >= 4 (a prompt half and a scored half)");
  if (max_tokens < 0 || prompts < 0 || greedy_tokens < 1 || threads < 1) {
    return bench_fail("--max-tokens and --prompts must be >= 0, --greedy-tokens and --threads >= 1");
  }

  auto model = Model::Load(model_path);
  if (!model.ok()) return bench_fail(std::string(model.status().message()));
  const ModelSpec& spec = (*model)->spec();
  auto tokenizer = Tokenizer::FromGguf((*model)->file());
  if (!tokenizer.ok()) return bench_fail(std::string(tokenizer.status().message()));
  std::ifstream file(text_path, std::ios::binary);
  if (!file) return bench_fail("cannot read --text-file " + text_path);
  std::stringstream text;
  text << file.rdbuf();
  std::vector<int32_t> text_tokens = tokenize_text(**tokenizer, text.str(), per_line);
  if (max_tokens > 0 && static_cast<int64_t>(text_tokens.size()) > max_tokens) text_tokens.resize(max_tokens);

  // Chunks: [BOS] + chunk - 1 text tokens; a short last chunk is kept when it
  // has at least 8 tokens.
  const bool bos = (*tokenizer)->add_bos() && (*tokenizer)->bos_id() >= 0;
  const int64_t text_per_chunk = chunk - (bos ? 1 : 0);
  std::vector<std::vector<int32_t>> chunks;
  for (size_t at = 0; at < text_tokens.size(); at += text_per_chunk) {
    std::vector<int32_t> c;
    if (bos) c.push_back((*tokenizer)->bos_id());
    const size_t end = std::min(text_tokens.size(), at + static_cast<size_t>(text_per_chunk));
    c.insert(c.end(), text_tokens.begin() + at, text_tokens.begin() + end);
    if (c.size() >= 8 || (chunks.empty() && c.size() >= 4)) chunks.push_back(std::move(c));
  }
  if (chunks.empty()) return bench_fail("the text has too few tokens for one chunk");

  // Variants: the baseline first.
  std::vector<Variant> variants;
  std::vector<std::string> names = {kBaselineCodec};
  const std::string list = codecs.empty() ? default_codecs(spec.head_dim) : codecs;
  for (const std::string& name : std::vector<std::string>(absl::StrSplit(list, ',', absl::SkipEmpty()))) {
    names.push_back(name);
  }
  Engine engine(**model, EngineOptions{static_cast<int>(threads), 64});
  auto fingerprint = model_fingerprint(**model);
  if (!fingerprint.ok()) return bench_fail(std::string(fingerprint.status().message()));
  const Setup setup{&engine, *fingerprint, kv_rope_of(**model), engine.kv_geometry()};
  for (const std::string& name : names) {
    auto c = parse_kv_codec_config(name);
    if (!c.ok()) return bench_fail(std::string(c.status().message()));
    if (!variants.empty() && *c == variants.front().wire) continue;  // the baseline again
    Variant v;
    v.wire = *c;
    v.store = QuantizedKvCache::store_config_for(*c);
    if (absl::Status st = c->validate(setup.geometry); !st.ok()) v.error = std::string(st.message());
    variants.push_back(std::move(v));
  }

  const int n_vocab = spec.n_vocab;
  double f32_nll = 0.0;
  std::vector<float> logits, base_logits;  // [scored, n_vocab]
  std::vector<double> log_p, log_q;
  std::vector<std::vector<int32_t>> base_greedy(static_cast<size_t>(prompts));
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const std::vector<int32_t>& t = chunks[ci];
    const int64_t n = static_cast<int64_t>(t.size());
    const int64_t half = n / 2;        // prompt [0, half); the cloud sends [0, half - 1)
    const int64_t scored = n - half;   // tokens [half, n), predicted by positions [half - 1, n - 1)
    const std::span<const int32_t> tokens(t);
    F32KvCache cloud(setup.geometry, half);
    if (absl::Status st = engine.prefill(tokens.first(half - 1), cloud, nullptr); !st.ok()) {
      return bench_fail(std::string(st.message()));
    }
    {  // Local F32 KV, no handoff: the engine's own reference.
      F32KvCache local(setup.geometry, n);
      if (absl::Status st = engine.prefill(tokens.first(n - 1), local, nullptr, &logits); !st.ok()) {
        return bench_fail(std::string(st.message()));
      }
      for (int64_t i = 0; i < scored; ++i) {
        f32_nll += negative_log_likelihood(
            std::span<const float>(logits.data() + (half - 1 + i) * n_vocab, n_vocab), t[half + i]);
      }
    }
    const bool greedy_prompt = static_cast<int64_t>(ci) < prompts;
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      Variant& v = variants[vi];
      if (!v.error.empty()) continue;
      KvSegmentLoad load;
      auto edge = hand_off(setup, cloud, tokens.first(half - 1), v, n, &load);
      absl::Status st = edge.status();
      if (st.ok()) st = engine.prefill(tokens.subspan(half - 1, scored), **edge, nullptr, &logits);
      if (!st.ok()) {
        if (vi == 0) return bench_fail("the f16 baseline failed: " + std::string(st.message()));
        v.error = std::string(st.message());
        continue;
      }
      v.wire_bytes += load.encoded_bytes;
      v.raw_bytes += load.raw_bytes;
      v.wire_tokens += load.token_count;
      for (int64_t i = 0; i < scored; ++i) {
        const std::span<const float> row(logits.data() + i * n_vocab, n_vocab);
        v.nll += negative_log_likelihood(row, t[half + i]);
        if (vi == 0) continue;
        log_softmax(std::span<const float>(base_logits.data() + i * n_vocab, n_vocab), log_p);
        log_softmax(row, log_q);
        v.kl += kl_divergence(log_p, log_q);
      }
      v.scored_tokens += scored;
      if (vi == 0) base_logits = logits;

      if (greedy_prompt) {
        auto greedy = greedy_after_handoff(setup, cloud, tokens.first(half), v, greedy_tokens);
        if (!greedy.ok()) {
          if (vi == 0) return bench_fail("the f16 baseline failed: " + std::string(greedy.status().message()));
          v.error = std::string(greedy.status().message());
          continue;
        }
        if (vi == 0) base_greedy[ci] = *greedy;
        const std::vector<int32_t>& base = base_greedy[ci];
        int64_t first_difference = greedy_tokens;
        for (int64_t i = 0; i < greedy_tokens; ++i) {
          if ((*greedy)[i] == base[i]) {
            ++v.greedy_equal;
          } else if (first_difference == greedy_tokens) {
            first_difference = i;
          }
        }
        v.greedy_total += greedy_tokens;
        v.first_divergence_sum += first_difference;
        ++v.prompts;
      }
    }
  }

  // Figures.
  const double f16_bytes_per_token = 2.0 * static_cast<double>(spec.kv_elements_per_token());
  const Variant& base = variants.front();
  const double base_ppl = std::exp(base.nll / base.scored_tokens);
  const double f32_ppl = std::exp(f32_nll / base.scored_tokens);
  struct Row {
    const Variant* v;
    double wire_bpt, raw_bpt, ratio, store_bpt, ppl, ppl_change_pct, mean_kl, agreement, first_divergence;
  };
  std::vector<Row> rows;
  for (const Variant& v : variants) {
    Row r{&v, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    if (v.error.empty() && v.scored_tokens > 0) {
      r.wire_bpt = static_cast<double>(v.wire_bytes) / static_cast<double>(v.wire_tokens);
      r.raw_bpt = static_cast<double>(v.raw_bytes) / static_cast<double>(v.wire_tokens);
      r.ratio = r.wire_bpt / f16_bytes_per_token;
      r.store_bpt = static_cast<double>(QuantizedKvCache::bytes_per_token(v.store, setup.geometry));
      r.ppl = std::exp(v.nll / v.scored_tokens);
      r.ppl_change_pct = 100.0 * (r.ppl / base_ppl - 1.0);
      r.mean_kl = v.kl / v.scored_tokens;
      r.agreement = v.greedy_total > 0 ? static_cast<double>(v.greedy_equal) / v.greedy_total : 0.0;
      r.first_divergence = v.prompts > 0 ? static_cast<double>(v.first_divergence_sum) / v.prompts : 0.0;
    }
    rows.push_back(r);
  }
  const int64_t n_prompts = std::min<int64_t>(prompts, static_cast<int64_t>(chunks.size()));

  if (json) {
    std::string out = absl::StrFormat(
        "{\"model\": \"%s\", \"text_file\": \"%s\", \"chunk_tokens\": %d, \"chunks\": %d, \"scored_tokens\": %d, "
        "\"bos\": %s, \"prompts\": %d, \"greedy_tokens\": %d, \"f16_bytes_per_token\": %.1f, "
        "\"baseline_codec\": \"%s\", \"baseline_perplexity\": %.6g, \"f32_local_perplexity\": %.6g, \"variants\": [",
        json_escape(spec.name), json_escape(text_path), chunk, chunks.size(), base.scored_tokens,
        bos ? "true" : "false", n_prompts, greedy_tokens, f16_bytes_per_token, kBaselineCodec, base_ppl, f32_ppl);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      if (i > 0) out += ", ";
      if (!r.v->error.empty()) {
        out += absl::StrFormat("{\"codec\": \"%s\", \"error\": \"%s\"}", json_escape(r.v->wire.to_string()),
                               json_escape(r.v->error));
        continue;
      }
      out += absl::StrFormat(
          "{\"codec\": \"%s\", \"store_codec\": \"%s\", \"wire_bytes_per_token\": %.1f, "
          "\"raw_bytes_per_token\": %.1f, \"wire_ratio_to_f16\": %.4f, \"store_bytes_per_token\": %.0f, "
          "\"perplexity\": %.6g, \"perplexity_change_pct\": %.4f, \"mean_kl\": %.6g, \"greedy_agreement\": %.4f, "
          "\"mean_first_divergence\": %.2f}",
          json_escape(r.v->wire.to_string()), json_escape(r.v->store.to_string()), r.wire_bpt, r.raw_bpt, r.ratio,
          r.store_bpt, r.ppl, r.ppl_change_pct, r.mean_kl, r.agreement, r.first_divergence);
    }
    out += "]}\n";
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  print_line(
      "kv-quality: %s, %d chunks of <= %d tokens%s; first half over the wire, second half scored (%d tokens); "
      "greedy: %d prompts x %d tokens\n",
      spec.name.c_str(), chunks.size(), chunk, bos ? " (BOS first)" : "", base.scored_tokens, n_prompts,
      greedy_tokens);
  print_line("baseline %s handoff: perplexity %.4f (local F32 KV, no handoff: %.4f); raw F16 KV %.0f bytes/token\n",
              kBaselineCodec, base_ppl, f32_ppl, f16_bytes_per_token);
  print_line("  %-22s %-14s %9s %8s %9s %10s %8s %10s %7s %7s\n", "codec", "store", "wire B/t", "vs f16",
              "store B/t", "ppl", "dppl %", "mean KL", "greedy", "1st dif");
  for (const Row& r : rows) {
    if (!r.v->error.empty()) {
      print_line("  %-22s skipped: %s\n", r.v->wire.to_string().c_str(), r.v->error.c_str());
      continue;
    }
    print_line("  %-22s %-14s %9.1f %8.4f %9.0f %10.4f %+8.3f %10.3e %7.3f %7.1f\n", r.v->wire.to_string().c_str(),
                r.v->store.to_string().c_str(), r.wire_bpt, r.ratio, r.store_bpt, r.ppl, r.ppl_change_pct, r.mean_kl,
                r.agreement, r.first_divergence);
  }
  return 0;
}

}  // namespace baton::cli
