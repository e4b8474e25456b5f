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
// Output: bench_fidelity_report.cc.
#include <algorithm>
#include <cmath>
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
#include "bench_fidelity.h"
#include "in_memory_handoff.h"
#include "bench_harness.h"
#include "common/engine/perplexity.h"
#include "common/model/model_quantize.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/check.h"
#include "kv_codec_list.h"
#include "logit_math.h"

namespace baton::cli {
namespace {

// "G": the group size min(32, head_dim) (kv_codec_list.h).
constexpr char kDefaultCodecs[] = "f16,int8-gG-z3,int4-pc-kg128-gG-z3";

// One loaded model with its engine, fingerprint and RoPE.
struct Side {
  std::string name;  // "f16" / "q4_0"
  LoadedModel loaded;
  ModelFingerprint fingerprint;
  KvRope rope;
  Engine& engine() const { return *loaded.engine; }
  HandoffEnd end() const { return {&fingerprint, &rope}; }
};

absl::StatusOr<std::unique_ptr<Side>> load_side(const std::string& name, const std::string& path, int64_t threads) {
  auto side = std::make_unique<Side>();
  side->name = name;
  BATON_ASSIGN_OR_RETURN(side->loaded, load_model(path, threads));
  BATON_ASSIGN_OR_RETURN(side->fingerprint, model_fingerprint(*side->loaded.model));
  side->rope = kv_rope_of(*side->loaded.model);
  return side;
}

// A row with what it needs to run: its codecs.
struct RowSetup {
  FidelityRow row;
  KvCodecConfig wire;
  KvCodecConfig store;
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

// Rows: the reference, Q4_0 alone on F32 KV, then per codec the three
// settings (alone, split with the cloud on F16, split with it on Q4_0).
absl::StatusOr<std::vector<RowSetup>> make_rows(const std::string& codecs, const KvGeometry& geometry) {
  std::vector<RowSetup> rows;
  for (const char* weights : {"f16", "q4_0"}) {
    RowSetup r;
    r.row.setting = "alone";
    r.row.edge_weights = weights;
    r.row.kv = "f32";
    rows.push_back(std::move(r));
  }
  const std::string codec_list = expand_codec_list(codecs, geometry.head_dim);
  for (const std::string& name : std::vector<std::string>(absl::StrSplit(codec_list, ',', absl::SkipEmpty()))) {
    BATON_ASSIGN_OR_RETURN(const KvCodecConfig wire, parse_kv_codec_config(name));
    for (const std::string setting : {"alone", "split-f16", "split-q4_0"}) {
      RowSetup r;
      r.row.setting = setting == "alone" ? "alone" : "split";
      r.row.cloud_weights = setting == "split-f16" ? "f16" : setting == "split-q4_0" ? "q4_0" : "";
      r.row.edge_weights = "q4_0";
      r.row.kv = name;
      r.wire = wire;
      r.store = QuantizedKvCache::store_config_for(wire);
      if (absl::Status st = wire.validate(geometry); !st.ok()) r.row.error = std::string(st.message());
      rows.push_back(std::move(r));
    }
  }
  return rows;
}

// What every window of the run shares.
struct FidelitySetup {
  const Side* f16 = nullptr;
  const Side* q4 = nullptr;
  int64_t window = 0, prompt = 0;
};

// The cloud's KV of one window's [0, P - 1) on each weight setting.
struct CloudKv {
  F32KvCache f16, q4;
};

// The edge's KV of [0, P - 1) for row `r`: its own prefill (alone rows) or
// handed over from the cloud (split rows, whose wire bytes it counts).
absl::StatusOr<std::unique_ptr<KvCache>> edge_kv(const FidelitySetup& s, RowSetup& r, const CloudKv& cloud,
                                                  std::span<const int32_t> cloud_prompt) {
  const Side& edge = r.row.edge_weights == "f16" ? *s.f16 : *s.q4;
  if (r.row.setting == "alone") {
    std::unique_ptr<KvCache> kv;
    if (r.row.kv == "f32") {
      kv = edge.engine().new_f32_kv_cache(s.window);
    } else {
      BATON_ASSIGN_OR_RETURN(kv, QuantizedKvCache::Create(edge.engine().kv_geometry(), s.window, r.store));
    }
    BATON_RETURN_IF_ERROR(edge.engine().prefill(cloud_prompt, *kv, nullptr));
    return kv;
  }
  const bool cloud_is_f16 = r.row.cloud_weights == "f16";
  const InMemoryHandoff handoff{(cloud_is_f16 ? *s.f16 : *s.q4).end(), edge.end(), edge.engine().kv_geometry(),
                                r.wire, r.store};
  KvSegmentLoad load;
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> kv,
                         hand_off(handoff, cloud_is_f16 ? cloud.f16 : cloud.q4, cloud_prompt, s.window, &load));
  r.row.wire_bytes += load.encoded_bytes;
  r.row.wire_tokens += load.token_count;
  return std::unique_ptr<KvCache>(std::move(kv));
}

// Every row on one window; row 0 (F16 alone) is the reference of the KL.
absl::Status run_window(const FidelitySetup& s, std::span<const int32_t> tokens, std::vector<RowSetup>& rows,
                        std::vector<float>& ref_logits, std::vector<float>& logits) {
  const std::span<const int32_t> cloud_prompt = tokens.first(s.prompt - 1);
  const KvGeometry geometry = s.f16->engine().kv_geometry();
  CloudKv cloud{F32KvCache(geometry, s.prompt - 1), F32KvCache(geometry, s.prompt - 1)};
  BATON_RETURN_IF_ERROR(s.f16->engine().prefill(cloud_prompt, cloud.f16, nullptr));
  BATON_RETURN_IF_ERROR(s.q4->engine().prefill(cloud_prompt, cloud.q4, nullptr));
  const int n_vocab = s.f16->loaded.spec().n_vocab;
  std::vector<double> log_p, log_q;
  for (size_t ri = 0; ri < rows.size(); ++ri) {
    FidelityRow& r = rows[ri].row;
    if (!r.error.empty()) continue;
    Engine& engine = (r.edge_weights == "f16" ? *s.f16 : *s.q4).engine();
    std::vector<float>& mine = ri == 0 ? ref_logits : logits;
    auto kv = edge_kv(s, rows[ri], cloud, cloud_prompt);
    absl::Status st = kv.status();
    if (st.ok()) st = decode_rest(engine, tokens, s.prompt - 1, **kv, mine);
    if (!st.ok()) {
      if (ri == 0) return with_context("the F16 reference failed: ", st);
      r.error = std::string(st.message());
      continue;
    }
    for (int64_t i = 0; i < s.window - s.prompt; ++i) {
      const std::span<const float> row(mine.data() + i * n_vocab, n_vocab);
      r.nll += negative_log_likelihood(row, tokens[s.prompt + i]);
      if (ri > 0) {
        log_softmax(std::span<const float>(ref_logits.data() + i * n_vocab, n_vocab), log_p);
        log_softmax(row, log_q);
        r.kl += kl_divergence(log_p, log_q);
      }
    }
    r.scored += s.window - s.prompt;
  }
  return absl::OkStatus();
}

std::string protocol_text(int64_t window, int64_t prompt, bool bos) {
  return absl::StrFormat(
      "windows of W=%d tokens%s; per window the first P=%d tokens are the prompt: the KV of tokens [0, %d) comes "
      "from the cloud (split rows: cloud prefill on its weights, F32 KV, written with the wire codec, read and "
      "verified into the edge's QuantizedKvCache(store_config_for(codec))) or from the edge's own batched "
      "prefill into that store (alone rows); the edge then runs token %d itself and decodes token by token, "
      "teacher-forced, to token %d; the logits at positions %d..%d score tokens %d..%d (%d per window). "
      "KL = mean KL(p_f16_alone || p_row) over scored tokens; the F16-alone reference uses F32 KV",
      window, bos ? " ([BOS] + W-1 held-out tokens)" : "", prompt, prompt - 1, prompt - 1, window - 2, prompt - 1,
      window - 2, prompt, window - 1, window - prompt);
}

struct FidelityFlags {
  std::string model_path, edge_model_path, ids_path, text_path, codecs = kDefaultCodecs;
  int64_t window = 128, prompt = 0, max_tokens = 8192, threads = 1;
  bool json = false;
};

// Parses and checks the flags; false after --help.
absl::StatusOr<bool> parse_fidelity_flags(const Args& args, FidelityFlags& f) {
  FlagSet flags("baton bench fidelity",
                "--model F16.gguf [--edge-model Q4_0.gguf] [--ids-file F | --text-file F] [--window 128] "
                "[--prompt W/2] [--max-tokens 8192] [--codecs LIST] [--json]",
                "Fidelity of the edge's Q4_0 weights and of the cloud/edge split, against the F16 model run "
                "alone: perplexity and mean KL divergence of the next-token distributions over held-out text, "
                "for the edge's Q4_0 alone and split with the cloud on the F16 source weights or on the edge's "
                "exact Q4_0 file, each with every KV codec (F16, INT8, INT4 by default). Prints the split "
                "protocol and which cloud-weights setting the numbers favour as the default.");
  flags.add_string("model", &f.model_path, "the F16 source model (GGUF, with tokenizer)", "FILE");
  flags.add_string("edge-model", &f.edge_model_path,
                   "the edge's Q4_0 file (default: --model quantized to Q4_0 into a temporary file)", "FILE");
  flags.add_string("ids-file", &f.ids_path,
                   "held-out token ids (default: NAME.heldout.ids next to --model when present)", "FILE");
  flags.add_string("text-file", &f.text_path, "held-out text, tokenized line by line without BOS", "FILE");
  flags.add_int64("window", &f.window, "tokens per window, BOS included");
  flags.add_int64("prompt", &f.prompt, "prompt tokens per window: [0, P-1) from the cloud (default W/2)");
  flags.add_int64("max-tokens", &f.max_tokens, "use at most this many held-out tokens (0: all)");
  flags.add_string("codecs", &f.codecs,
                   "comma-separated KV wire codecs (common/kv_codec/kv_codec_config.h); G stands for min(32, head_dim)",
                   "LIST");
  flags.add_int64("threads", &f.threads, "engine threads per model");
  flags.add_bool("json", &f.json, "print one JSON object instead of the table");
  flags.require("model");
  BATON_ASSIGN_OR_RETURN(const bool run, parse_bench_flags(flags, args));
  if (!run) return false;
  if (f.prompt == 0) f.prompt = f.window / 2;
  if (f.window < 4 || f.prompt < 2 || f.prompt >= f.window) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--window %d and --prompt %d: need window >= 4 and 2 <= prompt < window", f.window, f.prompt));
  }
  if (f.threads < 1 || f.max_tokens < 0) {
    return absl::InvalidArgumentError("--threads must be >= 1 and --max-tokens >= 0");
  }
  if (!f.ids_path.empty() && !f.text_path.empty()) {
    return absl::InvalidArgumentError("give at most one of --ids-file and --text-file");
  }
  if (f.ids_path.empty() && f.text_path.empty()) {
    f.ids_path = default_ids_file(f.model_path);
    if (f.ids_path.empty()) {
      return absl::InvalidArgumentError("no --ids-file or --text-file, and no NAME.heldout.ids next to " +
                                        f.model_path);
    }
  }
  return true;
}

// The two models: the F16 source and the edge's Q4_0 file, given or made
// from the source now (into a temporary file removed once mapped).
absl::Status load_sides(const FidelityFlags& f, std::unique_ptr<Side>& f16, std::unique_ptr<Side>& q4) {
  std::string edge_path = f.edge_model_path, temp_path;
  if (edge_path.empty()) {
    temp_path = (std::filesystem::temp_directory_path() /
                 absl::StrFormat("baton-fidelity-%d-q4_0.gguf", static_cast<int>(::getpid())))
                    .string();
    QuantizeOptions q;
    q.type = GgmlType::kQ4_0;
    q.n_threads = static_cast<int>(f.threads);
    BATON_RETURN_IF_ERROR(with_context("quantizing --model to Q4_0: ", quantize_model(f.model_path, temp_path, q)));
    edge_path = temp_path;
  }
  auto f16_side = load_side("f16", f.model_path, f.threads);
  auto q4_side = f16_side.ok() ? load_side("q4_0", edge_path, f.threads) : f16_side.status();
  if (!temp_path.empty()) std::filesystem::remove(temp_path);  // mapped pages stay valid
  BATON_RETURN_IF_ERROR(f16_side.status());
  BATON_RETURN_IF_ERROR(q4_side.status());
  f16 = std::move(*f16_side);
  q4 = std::move(*q4_side);
  return with_context("the edge model does not derive from --model: ",
                      compare_model_fingerprints(q4->fingerprint, f16->fingerprint, "the F16 source"));
}

// Windows of [BOS] + window - 1 text tokens; full windows only (every window
// scores the same positions).
std::vector<std::vector<int32_t>> cut_windows(const std::vector<int32_t>& text_tokens, int64_t window,
                                              int32_t bos_id) {
  const int64_t text_per_window = window - (bos_id >= 0 ? 1 : 0);
  std::vector<std::vector<int32_t>> windows;
  for (size_t at = 0; at + text_per_window <= text_tokens.size(); at += text_per_window) {
    std::vector<int32_t> w;
    if (bos_id >= 0) w.push_back(bos_id);
    w.insert(w.end(), text_tokens.begin() + at, text_tokens.begin() + at + text_per_window);
    windows.push_back(std::move(w));
  }
  return windows;
}

}  // namespace

absl::Status bench_fidelity(const Args& args) {
  FidelityFlags f;
  BATON_ASSIGN_OR_RETURN(const bool run, parse_fidelity_flags(args, f));
  if (!run) return absl::OkStatus();
  std::unique_ptr<Side> f16, q4;
  BATON_RETURN_IF_ERROR(load_sides(f, f16, q4));
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromGguf(f16->loaded.model->file()));
  BATON_ASSIGN_OR_RETURN(std::vector<int32_t> text_tokens, read_tokens(f.ids_path, f.text_path, *tokenizer));
  if (f.max_tokens > 0 && static_cast<int64_t>(text_tokens.size()) > f.max_tokens) text_tokens.resize(f.max_tokens);
  const bool bos = tokenizer->add_bos() && tokenizer->bos_id() >= 0;
  const std::vector<std::vector<int32_t>> windows = cut_windows(text_tokens, f.window, bos ? tokenizer->bos_id() : -1);
  if (windows.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("the text has fewer than %d tokens", f.window - (bos ? 1 : 0)));
  }
  BATON_ASSIGN_OR_RETURN(std::vector<RowSetup> rows, make_rows(f.codecs, f16->engine().kv_geometry()));

  const FidelitySetup setup{f16.get(), q4.get(), f.window, f.prompt};
  std::vector<float> ref_logits, logits;  // [W - P, n_vocab]
  for (const std::vector<int32_t>& w : windows) BATON_RETURN_IF_ERROR(run_window(setup, w, rows, ref_logits, logits));

  FidelityRun result;
  result.model_path = f.model_path;
  result.model_name = f16->loaded.spec().name;
  result.edge_model = f.edge_model_path;
  result.tokens_file = f.ids_path.empty() ? f.text_path : f.ids_path;
  result.window = f.window;
  result.prompt = f.prompt;
  result.windows = static_cast<int64_t>(windows.size());
  result.protocol = protocol_text(f.window, f.prompt, bos);
  for (const RowSetup& r : rows) result.rows.push_back(r.row);
  result.verdict = fidelity_verdict(result.rows);
  if (f.json) {
    print_json_line(fidelity_json(result));
  } else {
    print_fidelity_table(result);
  }
  return absl::OkStatus();
}

}  // namespace baton::cli
