// baton bench fidelity: what the edge's Q4_0 weights and the cloud/edge split
// cost in model quality, against the F16 model run alone.
//
// Protocol (printed with the table): the held-out tokens are cut into windows
// of W tokens ([BOS] + W - 1 text tokens when the tokenizer adds BOS). In each
// window the first P tokens are the prompt and tokens [P, W) are scored:
//   - the prompt's first P - 1 tokens get their KV from the "cloud" (or, for
//     the "alone" rows, from the model itself by a local batched prefill);
//   - the edge then runs token P - 1 itself (the n-1 rule: fresh logits from
//     its own weights) and continues token by token, teacher-forced, through
//     token W - 2, appending each token's KV to its own store; the logits at
//     positions P - 1 .. W - 2 score tokens P .. W - 1.
// Split rows: the cloud prefills [0, P - 1) with its weights (the F16 source
// or the edge's exact Q4_0 file) into F32 KV, writes the segment with the wire
// codec (kv_handoff.h: encode, stream writer, zstd), and the edge reads it
// (verifying fingerprint, positions, prefix digest, every block and the
// trailer) into a QuantizedKvCache configured by store_config_for(codec).
// Alone rows: one model does everything, its KV in the same store (F32 for
// the reference). All in process; no gRPC.
// Figures per row, over all scored tokens: perplexity, and the mean
// KL(p_f16_alone || p_row) of the next-token distributions.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

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
#include "common/model/model_quantize.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/check.h"
#include "common/util/flags.h"
#include "kv_codec_list.h"
#include "logit_math.h"
#include "report.h"

namespace baton::cli {
namespace {

// "G": the group size min(32, head_dim) (kv_codec_list.h).
constexpr char kDefaultCodecs[] = "f16,int8-gG-z3,int4-pc-kg128-gG-z3";

// One loaded model with its engine and fingerprint.
struct Side {
  std::string name;  // "f16" / "q4_0"
  std::unique_ptr<Model> model;
  std::unique_ptr<Engine> engine;
  ModelFingerprint fingerprint;
};

absl::StatusOr<Side> load_side(const std::string& name, const std::string& path, int threads) {
  Side side;
  side.name = name;
  BATON_ASSIGN_OR_RETURN(side.model, Model::Load(path));
  side.engine = std::make_unique<Engine>(*side.model, EngineOptions{threads, 64});
  BATON_ASSIGN_OR_RETURN(side.fingerprint, model_fingerprint(*side.model));
  return side;
}

// One row of the table.
struct Row {
  std::string setting;        // "alone" / "split"
  std::string cloud_weights;  // for split rows: "f16" / "q4_0"; else ""
  std::string edge_weights;   // "f16" / "q4_0"
  std::string kv;             // wire codec name, or "f32" (engine cache)
  KvCodecConfig wire;
  KvCodecConfig store;
  double nll = 0.0;
  double kl = 0.0;
  int64_t scored = 0;
  uint64_t wire_bytes = 0;  // split rows: payload bytes after zstd
  int64_t wire_tokens = 0;
  std::string error;
};

// Runs tokens [first, n - 1) of `window` on `engine` over `kv` (which holds
// [0, first)) one decode step at a time; logits of each step: [n - 1 - first, n_vocab].
absl::Status decode_rest(Engine& engine, std::span<const int32_t> window, int64_t first, KvCache& kv,
                         std::vector<float>& logits_out) {
  const int64_t n = static_cast<int64_t>(window.size());
  const int n_vocab = engine.model().spec().n_vocab;
  logits_out.assign(static_cast<size_t>((n - 1 - first) * n_vocab), 0.0f);
  std::vector<float> logits;
  for (int64_t pos = first; pos < n - 1; ++pos) {
    BATON_RETURN_IF_ERROR(engine.decode_step(window[pos], kv, &logits));
    std::copy(logits.begin(), logits.end(), logits_out.begin() + (pos - first) * n_vocab);
  }
  return absl::OkStatus();
}

// The KV of window [0, p) from `cloud` (F32, holding [0, p)) through the
// wire codec into a fresh edge store of `capacity` tokens.
absl::StatusOr<std::unique_ptr<QuantizedKvCache>> hand_off(const Side& cloud_side, const F32KvCache& cloud,
                                                           const Side& edge_side, std::span<const int32_t> prompt,
                                                           const Row& row, int64_t capacity, KvSegmentLoad* load) {
  KvStreamHeaderInfo info;
  info.model = cloud_side.fingerprint;
  info.codec = row.wire;
  info.first_position = 0;
  info.token_ids.assign(prompt.begin(), prompt.end());
  info.prefix_digest = prefix_digest(prompt);
  std::vector<v1::KvStreamMessage> messages;
  KvStreamWriter writer([&](const v1::KvStreamMessage& m) {
    messages.push_back(m);
    return absl::OkStatus();
  });
  const KvRope cloud_rope = kv_rope_of(*cloud_side.model);
  BATON_RETURN_IF_ERROR(write_kv_segment(cloud, info, &cloud_rope, writer));

  BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> edge,
                         QuantizedKvCache::Create(edge_side.engine->kv_geometry(), capacity, row.store));
  KvStreamExpectation expected;
  expected.model = edge_side.fingerprint;
  expected.first_position = 0;
  expected.token_ids = info.token_ids;
  expected.prefix_digest = info.prefix_digest;
  expected.codec = messages.front().header().codec();
  const KvRope edge_rope = kv_rope_of(*edge_side.model);
  BATON_ASSIGN_OR_RETURN(*load, read_kv_segment(messages, expected, &edge_rope, *edge));
  return edge;
}

// Token ids: an ids file (space-separated, any number per line) or a text
// file tokenized line by line without BOS (the held-out recipe).
absl::StatusOr<std::vector<int32_t>> read_tokens(const std::string& ids_path, const std::string& text_path,
                                                 const Tokenizer& tokenizer) {
  const std::string& path = ids_path.empty() ? text_path : ids_path;
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read " + path);
  std::vector<int32_t> tokens;
  EncodeOptions no_bos;
  no_bos.add_bos = false;
  no_bos.add_eos = false;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (ids_path.empty()) {
      const std::vector<int32_t> ids = tokenizer.encode(line, no_bos);
      tokens.insert(tokens.end(), ids.begin(), ids.end());
    } else {
      std::istringstream words(line);
      for (int32_t id; words >> id;) tokens.push_back(id);
    }
  }
  return tokens;
}

// The held-out ids next to a bundled model: for DIR/NAME-f16.gguf,
// DIR/NAME.heldout.ids (then DIR/NAME-f16.heldout.ids).
std::string default_ids_file(const std::string& model_path) {
  const std::filesystem::path p(model_path);
  std::string stem = p.stem().string();
  std::vector<std::string> stems = {stem};
  if (const size_t dash = stem.rfind('-'); dash != std::string::npos) stems.insert(stems.begin(), stem.substr(0, dash));
  for (const std::string& s : stems) {
    const std::filesystem::path candidate = p.parent_path() / (s + ".heldout.ids");
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  return "";
}

}  // namespace

int bench_fidelity(const Args& args) {
  std::string model_path, edge_model_path, ids_path, text_path, codecs = kDefaultCodecs;
  int64_t window = 128, prompt = 0, max_tokens = 8192, threads = 1;
  bool json = false;
  FlagSet flags("baton bench fidelity",
                "--model F16.gguf [--edge-model Q4_0.gguf] [--ids-file F | --text-file F] [--window 128] "
                "[--prompt W/2] [--max-tokens 8192] [--codecs LIST] [--json]",
                "Fidelity of the edge's Q4_0 weights and of the cloud/edge split, against the F16 model run "
                "alone: perplexity and mean KL divergence of the next-token distributions over held-out text, "
                "for the edge's Q4_0 alone and split with the cloud on the F16 source weights or on the edge's "
                "exact Q4_0 file, each with every KV codec (F16, INT8, INT4 by default). Prints the split "
                "protocol and which cloud-weights setting the numbers favour as the default.");
  flags.add_string("model", &model_path, "the F16 source model (GGUF, with tokenizer)", "FILE");
  flags.add_string("edge-model", &edge_model_path,
                   "the edge's Q4_0 file (default: --model quantized to Q4_0 into a temporary file)", "FILE");
  flags.add_string("ids-file", &ids_path,
                   "held-out token ids (default: NAME.heldout.ids next to --model when present)", "FILE");
  flags.add_string("text-file", &text_path, "held-out text, tokenized line by line without BOS", "FILE");
  flags.add_int64("window", &window, "tokens per window, BOS included");
  flags.add_int64("prompt", &prompt, "prompt tokens per window: [0, P-1) from the cloud (default W/2)");
  flags.add_int64("max-tokens", &max_tokens, "use at most this many held-out tokens (0: all)");
  flags.add_string("codecs", &codecs,
                   "comma-separated KV wire codecs (common/kv/kv_codec_config.h); G stands for min(32, head_dim)",
                   "LIST");
  flags.add_int64("threads", &threads, "engine threads per model");
  flags.add_bool("json", &json, "print one JSON object instead of the table");
  flags.require("model");
  if (auto code = bench_parse_flags(flags, args)) return *code;
  if (prompt == 0) prompt = window / 2;
  if (window < 4 || prompt < 2 || prompt >= window) {
    return bench_fail(absl::StrFormat("--window %d and --prompt %d: need window >= 4 and 2 <= prompt < window", window,
                                prompt));
  }
  if (threads < 1 || max_tokens < 0) return bench_fail("--threads must be >= 1 and --max-tokens >= 0");
  if (!ids_path.empty() && !text_path.empty()) return bench_fail("give at most one of --ids-file and --text-file");
  if (ids_path.empty() && text_path.empty()) {
    ids_path = default_ids_file(model_path);
    if (ids_path.empty()) return bench_fail("no --ids-file or --text-file, and no NAME.heldout.ids next to " + model_path);
  }

  // The edge's Q4_0 file: given, or made from the source now.
  std::string temp_path;
  if (edge_model_path.empty()) {
    temp_path = (std::filesystem::temp_directory_path() /
                 absl::StrFormat("baton-fidelity-%d-q4_0.gguf", static_cast<int>(::getpid())))
                    .string();
    QuantizeOptions q;
    q.type = GgmlType::kQ4_0;
    q.n_threads = static_cast<int>(threads);
    if (absl::Status st = quantize_model(model_path, temp_path, q); !st.ok()) {
      return bench_fail("quantizing --model to Q4_0: " + std::string(st.message()));
    }
    edge_model_path = temp_path;
  }
  auto f16 = load_side("f16", model_path, static_cast<int>(threads));
  auto q4 = f16.ok() ? load_side("q4_0", edge_model_path, static_cast<int>(threads)) : f16.status();
  if (!temp_path.empty()) std::filesystem::remove(temp_path);  // mapped pages stay valid
  if (!f16.ok()) return bench_fail(std::string(f16.status().message()));
  if (!q4.ok()) return bench_fail(std::string(q4.status().message()));
  if (absl::Status st = compare_model_fingerprints(q4->fingerprint, f16->fingerprint, "the F16 source"); !st.ok()) {
    return bench_fail("the edge model does not derive from --model: " + std::string(st.message()));
  }
  const ModelSpec& spec = f16->model->spec();
  auto tokenizer = Tokenizer::FromGguf(f16->model->file());
  if (!tokenizer.ok()) return bench_fail(std::string(tokenizer.status().message()));
  auto text_tokens = read_tokens(ids_path, text_path, **tokenizer);
  if (!text_tokens.ok()) return bench_fail(std::string(text_tokens.status().message()));
  if (max_tokens > 0 && static_cast<int64_t>(text_tokens->size()) > max_tokens) text_tokens->resize(max_tokens);

  // Windows: [BOS] + window - 1 text tokens; full windows only (every window
  // scores the same positions).
  const bool bos = (*tokenizer)->add_bos() && (*tokenizer)->bos_id() >= 0;
  const int64_t text_per_window = window - (bos ? 1 : 0);
  std::vector<std::vector<int32_t>> windows;
  for (size_t at = 0; at + text_per_window <= text_tokens->size(); at += text_per_window) {
    std::vector<int32_t> w;
    if (bos) w.push_back((*tokenizer)->bos_id());
    w.insert(w.end(), text_tokens->begin() + at, text_tokens->begin() + at + text_per_window);
    windows.push_back(std::move(w));
  }
  if (windows.empty()) return bench_fail(absl::StrFormat("the text has fewer than %d tokens", text_per_window));

  // Rows: the reference, Q4_0 alone on F32 KV, then per codec the three settings.
  std::vector<Row> rows;
  for (const char* weights : {"f16", "q4_0"}) {
    Row r;
    r.setting = "alone";
    r.edge_weights = weights;
    r.kv = "f32";
    rows.push_back(std::move(r));
  }
  const std::string codec_list = expand_codec_list(codecs, spec.head_dim);
  for (const std::string& name : std::vector<std::string>(absl::StrSplit(codec_list, ',', absl::SkipEmpty()))) {
    auto wire = parse_kv_codec_config(name);
    if (!wire.ok()) return bench_fail(std::string(wire.status().message()));
    for (const char* setting : {"alone", "split-f16", "split-q4_0"}) {
      Row r;
      r.setting = std::string(setting) == "alone" ? "alone" : "split";
      r.cloud_weights = std::string(setting) == "split-f16" ? "f16" : std::string(setting) == "split-q4_0" ? "q4_0" : "";
      r.edge_weights = "q4_0";
      r.kv = name;
      r.wire = *wire;
      r.store = QuantizedKvCache::store_config_for(*wire);
      if (absl::Status st = wire->validate(f16->engine->kv_geometry()); !st.ok()) r.error = std::string(st.message());
      rows.push_back(std::move(r));
    }
  }

  const int n_vocab = spec.n_vocab;
  const KvGeometry geometry = f16->engine->kv_geometry();
  std::vector<float> ref_logits, logits;  // [W - P, n_vocab]
  std::vector<double> log_p, log_q;
  for (const std::vector<int32_t>& w : windows) {
    const std::span<const int32_t> tokens(w);
    const std::span<const int32_t> cloud_prompt = tokens.first(prompt - 1);
    // The cloud's KV of [0, P - 1) on each weight setting.
    F32KvCache cloud_f16(geometry, prompt - 1), cloud_q4(geometry, prompt - 1);
    if (absl::Status st = f16->engine->prefill(cloud_prompt, cloud_f16, nullptr); !st.ok()) {
      return bench_fail(std::string(st.message()));
    }
    if (absl::Status st = q4->engine->prefill(cloud_prompt, cloud_q4, nullptr); !st.ok()) {
      return bench_fail(std::string(st.message()));
    }
    for (size_t ri = 0; ri < rows.size(); ++ri) {
      Row& r = rows[ri];
      if (!r.error.empty()) continue;
      Side& edge = r.edge_weights == "f16" ? *f16 : *q4;
      std::unique_ptr<KvCache> kv;
      absl::Status st;
      if (r.setting == "alone") {
        if (r.kv == "f32") {
          kv = edge.engine->new_f32_kv_cache(window);
        } else {
          auto store = QuantizedKvCache::Create(geometry, window, r.store);
          st = store.status();
          if (st.ok()) kv = std::move(*store);
        }
        if (st.ok()) st = edge.engine->prefill(cloud_prompt, *kv, nullptr);
      } else {
        const bool cloud_is_f16 = r.cloud_weights == "f16";
        KvSegmentLoad load;
        auto store = hand_off(cloud_is_f16 ? *f16 : *q4, cloud_is_f16 ? cloud_f16 : cloud_q4, edge, cloud_prompt, r,
                              window, &load);
        st = store.status();
        if (st.ok()) {
          kv = std::move(*store);
          r.wire_bytes += load.encoded_bytes;
          r.wire_tokens += load.token_count;
        }
      }
      if (st.ok()) st = decode_rest(*edge.engine, tokens, prompt - 1, *kv, ri == 0 ? ref_logits : logits);
      if (!st.ok()) {
        if (ri == 0) return bench_fail("the F16 reference failed: " + std::string(st.message()));
        r.error = std::string(st.message());
        continue;
      }
      const std::vector<float>& mine = ri == 0 ? ref_logits : logits;
      for (int64_t i = 0; i < window - prompt; ++i) {
        const std::span<const float> row(mine.data() + i * n_vocab, n_vocab);
        r.nll += negative_log_likelihood(row, w[prompt + i]);
        if (ri > 0) {
          log_softmax(std::span<const float>(ref_logits.data() + i * n_vocab, n_vocab), log_p);
          log_softmax(row, log_q);
          r.kl += kl_divergence(log_p, log_q);
        }
      }
      r.scored += window - prompt;
    }
  }

  // The default cloud weights: per codec, the split setting with the lower
  // mean KL wins; the majority of codecs decides, the summed KL breaks a tie.
  int f16_wins = 0, q4_wins = 0, compared = 0;
  double f16_kl_sum = 0, q4_kl_sum = 0;
  for (size_t i = 0; i + 1 < rows.size(); ++i) {
    const Row& a = rows[i];
    const Row& b = rows[i + 1];
    if (a.setting != "split" || a.cloud_weights != "f16" || b.cloud_weights != "q4_0" || !a.error.empty() ||
        !b.error.empty() || a.scored == 0 || b.scored == 0) {
      continue;
    }
    const double kl_a = a.kl / a.scored, kl_b = b.kl / b.scored;
    ++compared;
    f16_kl_sum += kl_a;
    q4_kl_sum += kl_b;
    (kl_a <= kl_b ? f16_wins : q4_wins) += 1;
  }
  const std::string recommended =
      compared == 0 ? "none" : (f16_wins != q4_wins ? (f16_wins > q4_wins ? "f16" : "q4_0")
                                                    : (f16_kl_sum <= q4_kl_sum ? "f16" : "q4_0"));
  const std::string protocol = absl::StrFormat(
      "windows of W=%d tokens%s; per window the first P=%d tokens are the prompt: the KV of tokens [0, %d) comes "
      "from the cloud (split rows: cloud prefill on its weights, F32 KV, written with the wire codec, read and "
      "verified into the edge's QuantizedKvCache(store_config_for(codec))) or from the edge's own batched "
      "prefill into that store (alone rows); the edge then runs token %d itself and decodes token by token, "
      "teacher-forced, to token %d; the logits at positions %d..%d score tokens %d..%d (%d per window). "
      "KL = mean KL(p_f16_alone || p_row) over scored tokens; the F16-alone reference uses F32 KV",
      window, bos ? " ([BOS] + W-1 held-out tokens)" : "", prompt, prompt - 1, prompt - 1, window - 2, prompt - 1,
      window - 2, prompt, window - 1, window - prompt);
  auto ppl = [](const Row& r) { return std::exp(r.nll / static_cast<double>(r.scored)); };
  const int64_t scored_total = rows.front().scored;

  if (json) {
    std::string out = absl::StrFormat(
        "{\"model\": \"%s\", \"edge_model\": \"%s\", \"tokens_file\": \"%s\", \"window\": %d, \"prompt\": %d, "
        "\"windows\": %d, \"scored_tokens\": %d, \"protocol\": \"%s\", \"recommended_cloud_weights\": \"%s\", "
        "\"rows\": [",
        json_escape(model_path), json_escape(temp_path.empty() ? edge_model_path : "(quantized in memory)"),
        json_escape(ids_path.empty() ? text_path : ids_path), window, prompt, windows.size(), scored_total,
        json_escape(protocol), recommended);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      if (i > 0) out += ", ";
      out += absl::StrFormat("{\"setting\": \"%s\", \"cloud_weights\": \"%s\", \"edge_weights\": \"%s\", "
                             "\"kv\": \"%s\"",
                             r.setting, r.cloud_weights, r.edge_weights, json_escape(r.kv));
      if (!r.error.empty()) {
        out += absl::StrFormat(", \"error\": \"%s\"}", json_escape(r.error));
        continue;
      }
      out += absl::StrFormat(", \"perplexity\": %.6g, \"mean_kl\": %.6g", ppl(r), r.kl / r.scored);
      if (r.wire_tokens > 0) {
        out += absl::StrFormat(", \"wire_bytes_per_token\": %.1f",
                               static_cast<double>(r.wire_bytes) / static_cast<double>(r.wire_tokens));
      }
      out += "}";
    }
    out += "]}\n";
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  print_line("fidelity: %s (F16 source) vs the edge's Q4_0 %s; %d windows, %d scored tokens\n", spec.name,
             temp_path.empty() ? edge_model_path : "(quantized from it in memory)", windows.size(), scored_total);
  print_line("protocol: %s\n", protocol);
  print_line("  %-8s %-13s %-6s %-22s %10s %12s %10s\n", "setting", "cloud weights", "edge", "kv codec",
             "perplexity", "mean KL", "wire B/t");
  for (const Row& r : rows) {
    const std::string cloud = r.setting == "split" ? r.cloud_weights : "-";
    if (!r.error.empty()) {
      print_line("  %-8s %-13s %-6s %-22s failed: %s\n", r.setting, cloud, r.edge_weights, r.kv, r.error);
      continue;
    }
    const std::string wire = r.wire_tokens > 0 ? absl::StrFormat("%.1f", static_cast<double>(r.wire_bytes) /
                                                                              static_cast<double>(r.wire_tokens))
                                               : "-";
    print_line("  %-8s %-13s %-6s %-22s %10.4f %12.4e %10s\n", r.setting, cloud, r.edge_weights, r.kv, ppl(r),
               r.kl / r.scored, wire);
  }
  if (compared > 0) {
    print_line("default cloud weights: %s (lower mean KL to F16-alone in %d of %d KV codecs; summed mean KL: cloud "
               "f16 %.4e, cloud q4_0 %.4e)\n",
               recommended, std::max(f16_wins, q4_wins), compared, f16_kl_sum, q4_kl_sum);
  }
  return 0;
}

}  // namespace baton::cli
