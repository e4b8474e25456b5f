// baton model calibrate: the transform KV codec's calibration of a model
// (kv_calibration.h) over a text file, with the quality table the edge's
// --codec auto chooses from (kv_quality.h, measured on held-out text),
// written as a .batoncal file.
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "commands.h"
#include "common/engine/engine.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/check.h"
#include "common/util/flags.h"
#include "common/util/read_file.h"
#include "common/util/sha256.h"
#include "kv_calibrate.h"
#include "kv_codec_list.h"
#include "kv_quality.h"
#include "text_chunks.h"

namespace baton::cli {
namespace {

// The codecs of the quality table by default: the transform codec at the
// budgets of the rate-distortion curve and the variants the edge asks for
// by width ("G": min(32, head_dim)).
constexpr char kDefaultQualityCodecs[] =
    "tc-b1,tc-b1.5,tc-b2,tc-b2.5,tc-b3,tc-b4,int8-gG-z3,int4-gG-z3,int4-pc-kg128-gG-z3,int4-k8-gG-z3";

struct CalibrateFlags {
  std::string model, text_file, output, holdout_text, quality_codecs = kDefaultQualityCodecs;
  int64_t chunk = 512, max_tokens = 0, threads = 0, holdout_percent = 25, holdout_tokens = 4096;
  bool per_line = true;
};

// The basis's chunks and the held-out ones (for the quality table), cut as
// `baton bench kv-quality` cuts them.
struct CalibrationText {
  std::vector<std::vector<int32_t>> basis, holdout;
  std::string holdout_source;  // for the summary
};

absl::StatusOr<CalibrationText> calibration_text(const Model& model, const CalibrateFlags& f, bool with_table) {
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromGguf(model.file()));
  BATON_ASSIGN_OR_RETURN(const std::string text, read_file(f.text_file, "--text-file"));
  std::vector<int32_t> tokens = tokenize_text(*tokenizer, text, f.per_line);
  if (f.max_tokens > 0 && static_cast<int64_t>(tokens.size()) > f.max_tokens) tokens.resize(f.max_tokens);
  std::vector<int32_t> holdout;
  CalibrationText out;
  if (with_table && !f.holdout_text.empty()) {
    BATON_ASSIGN_OR_RETURN(const std::string held, read_file(f.holdout_text, "--holdout-text"));
    holdout = tokenize_text(*tokenizer, held, f.per_line);
    out.holdout_source = f.holdout_text;
  } else if (with_table) {
    // The tail of the text: never seen by the basis.
    const size_t tail = tokens.size() * static_cast<size_t>(f.holdout_percent) / 100;
    holdout.assign(tokens.end() - static_cast<std::ptrdiff_t>(tail), tokens.end());
    tokens.resize(tokens.size() - tail);
    out.holdout_source = absl::StrFormat("the last %d%% of %s", f.holdout_percent, f.text_file);
  }
  if (f.holdout_tokens > 0 && static_cast<int64_t>(holdout.size()) > f.holdout_tokens) holdout.resize(f.holdout_tokens);
  const int32_t bos = tokenizer->add_bos() && tokenizer->bos_id() >= 0 ? tokenizer->bos_id() : -1;
  out.basis = cut_chunks(tokens, f.chunk, bos);
  if (out.basis.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--text-file %s has %d tokens for the basis: too few for one chunk", f.text_file, tokens.size()));
  }
  out.holdout = cut_chunks(holdout, f.chunk, bos);
  if (with_table && out.holdout.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s has %d tokens: too few to measure the quality table (give --holdout-text or --quality-codecs none)",
        out.holdout_source, holdout.size()));
  }
  return out;
}

// The quality table of `calibration`'s codecs on the held-out chunks.
absl::StatusOr<std::vector<KvCodecQuality>> measure_table(const Model& model, Engine& engine,
                                                          const KvCalibration& calibration, const CalibrateFlags& f,
                                                          const CalibrationText& text) {
  const std::string list = expand_codec_list(f.quality_codecs, engine.kv_geometry().head_dim);
  const std::vector<std::string> codecs = absl::StrSplit(list, ',', absl::SkipEmpty());
  BATON_ASSIGN_OR_RETURN(const KvQualityMeasurement measured,
                         measure_kv_quality(model, engine, text.holdout, codecs,
                                            std::make_shared<const KvCalibration>(calibration), KvQualityOptions{}));
  std::printf("quality on %s (%lld scored tokens; wire bytes / F16, perplexity change, mean KL):\n",
              text.holdout_source.c_str(), static_cast<long long>(measured.scored_tokens));
  for (size_t i = 1; i < measured.rows.size(); ++i) {
    const KvQualityRow& r = measured.rows[i];
    if (!r.error.empty()) {
      std::printf("  %-24s skipped: %s\n", r.codec.c_str(), r.error.c_str());
    } else {
      std::printf("  %-24s %.3f  %+.3f%%  %.2e\n", r.codec.c_str(), r.ratio, r.ppl_change_pct, r.mean_kl);
    }
  }
  std::vector<KvCodecQuality> table = kv_quality_table(measured);
  if (table.empty()) return absl::InvalidArgumentError("no codec of --quality-codecs measured; nothing for the table");
  return table;
}

void print_summary(const KvCalibration& c, const CalibrateFlags& f, size_t chunks, double seconds) {
  std::printf("wrote %s in %.1f s: %lld tokens of %s (%zu chunk%s of at most %lld), %d layers x %d KV heads x %d "
              "dims\n",
              f.output.c_str(), seconds, static_cast<long long>(c.tokens), c.source.c_str(), chunks,
              chunks == 1 ? "" : "s", static_cast<long long>(f.chunk), c.n_layer, c.n_head_kv, c.head_dim);
  for (const bool is_key : {true, false}) {
    std::printf("%s (%s): the top 25%% of components hold %.1f%% of the variance, the top 50%% %.1f%% "
                "(mean over layers and heads)\n",
                is_key ? "K" : "V", is_key ? "pre-RoPE" : "as stored", 100.0 * variance_share(c, is_key, 0.25),
                100.0 * variance_share(c, is_key, 0.5));
  }
  if (!c.quality.empty()) std::printf("quality table: %zu codecs (for baton-edge --codec auto)\n", c.quality.size());
  std::printf("calibration digest %s\n", to_hex(kv_calibration_digest(c)).c_str());
}

}  // namespace

absl::Status model_calibrate(const Args& args) {
  CalibrateFlags f;
  FlagSet flags("baton model calibrate",
                "--model F --text-file T -o OUT.batoncal [--chunk 512] [--per-line|--no-per-line] [--max-tokens N] "
                "[--holdout-text F | --holdout-percent 25] [--quality-codecs LIST|none] [--threads N]",
                "Calibrates the transform KV codec for a model: prefills chunks of the text (BOS first when the "
                "tokenizer adds one) and computes, per layer, KV head and K|V, the mean, the PCA basis and the "
                "variance along each basis vector (keys before RoPE), and per layer and K|V the distribution of "
                "the normalized coefficients. Then it measures the quality table on held-out text (--holdout-text, "
                "else the last --holdout-percent of the text's tokens, which the basis does not see): per codec of "
                "--quality-codecs, wire bytes / F16, perplexity change and mean KL against the F16 handoff, as "
                "`baton bench kv-quality` does; baton-edge --codec auto chooses from it. The file is bound to the "
                "model's fingerprint; both ends of a handoff must hold the same one (the table is not part of "
                "its digest).");
  flags.add_string("model", &f.model, "GGUF model file (with tokenizer metadata)", "FILE");
  flags.add_string("text-file", &f.text_file, "calibration text", "FILE");
  flags.add_string("output", &f.output, "the .batoncal file to write (also -o)", "FILE");
  flags.add_int64("chunk", &f.chunk, "tokens per prefilled chunk, BOS included");
  flags.add_bool("per-line", &f.per_line,
                 "tokenize each line on its own and concatenate without newlines (as `bench kv-quality`); "
                 "--no-per-line tokenizes the text whole");
  flags.add_int64("max-tokens", &f.max_tokens, "use at most this many text tokens (0: all)");
  flags.add_string("holdout-text", &f.holdout_text,
                   "held-out text for the quality table; unset: the last --holdout-percent of --text-file's tokens "
                   "(then not used for the basis)",
                   "FILE");
  flags.add_int64("holdout-percent", &f.holdout_percent,
                  "percent of --text-file's tokens held out for the quality table when --holdout-text is unset");
  flags.add_int64("holdout-tokens", &f.holdout_tokens,
                  "measure the table on at most this many held-out tokens (0: all)");
  flags.add_string("quality-codecs", &f.quality_codecs,
                   "comma-separated codecs of the quality table (G: min(32, head_dim)); 'none': no table (a format 1 "
                   "file)",
                   "LIST");
  flags.add_int64("threads", &f.threads, "engine threads (0: all)");
  flags.require("model");
  flags.require("text-file");
  flags.require("output");
  Args expanded = args;
  for (std::string& arg : expanded) {
    if (arg == "-o") arg = "--output";
  }
  if (std::optional<absl::Status> done = parse_flags(flags, expanded)) return *done;
  if (f.chunk < 4 || f.max_tokens < 0 || f.threads < 0 || f.holdout_tokens < 0 || f.holdout_percent < 1 ||
      f.holdout_percent > 90) {
    return usage_error("model calibrate",
                       "--chunk must be >= 4, --max-tokens, --holdout-tokens and --threads >= 0, --holdout-percent "
                       "in 1..90");
  }
  const bool with_table = f.quality_codecs != "none";
  const auto start = std::chrono::steady_clock::now();
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(f.model));
  BATON_ASSIGN_OR_RETURN(const CalibrationText text, calibration_text(*model, f, with_table));
  Engine engine(*model, EngineOptions{static_cast<int>(f.threads), 64});
  const std::string source = std::filesystem::path(f.text_file).filename().string();
  BATON_ASSIGN_OR_RETURN(KvCalibration calibration, calibrate_kv(*model, engine, text.basis, source));
  if (with_table) {
    BATON_ASSIGN_OR_RETURN(calibration.quality, measure_table(*model, engine, calibration, f, text));
  }
  BATON_RETURN_IF_ERROR(save_kv_calibration(calibration, f.output));
  print_summary(calibration, f, text.basis.size(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return absl::OkStatus();
}

}  // namespace baton::cli
