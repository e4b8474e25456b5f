// baton model calibrate: the transform KV codec's calibration of a model
// (kv_calibration.h) over a text file, written as a .batoncal file.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "absl/strings/str_format.h"
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
#include "text_chunks.h"

namespace baton::cli {
namespace {

struct CalibrateFlags {
  std::string model, text_file, output;
  int64_t chunk = 512, max_tokens = 0, threads = 0;
  bool per_line = true;
};

// The text's chunks, as `baton bench kv-quality` cuts them.
absl::StatusOr<std::vector<std::vector<int32_t>>> text_chunks(const Model& model, const CalibrateFlags& f) {
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromGguf(model.file()));
  BATON_ASSIGN_OR_RETURN(const std::string text, read_file(f.text_file, "--text-file"));
  std::vector<int32_t> tokens = tokenize_text(*tokenizer, text, f.per_line);
  if (f.max_tokens > 0 && static_cast<int64_t>(tokens.size()) > f.max_tokens) tokens.resize(f.max_tokens);
  const bool bos = tokenizer->add_bos() && tokenizer->bos_id() >= 0;
  std::vector<std::vector<int32_t>> chunks = cut_chunks(tokens, f.chunk, bos ? tokenizer->bos_id() : -1);
  if (chunks.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--text-file %s has %d tokens: too few for one chunk", f.text_file, tokens.size()));
  }
  return chunks;
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
  std::printf("calibration digest %s\n", to_hex(kv_calibration_digest(c)).c_str());
}

}  // namespace

absl::Status model_calibrate(const Args& args) {
  CalibrateFlags f;
  FlagSet flags("baton model calibrate",
                "--model F --text-file T -o OUT.batoncal [--chunk 512] [--per-line|--no-per-line] [--max-tokens N] "
                "[--threads N]",
                "Calibrates the transform KV codec for a model: prefills chunks of the text (BOS first when the "
                "tokenizer adds one) and computes, per layer, KV head and K|V, the mean, the PCA basis and the "
                "variance along each basis vector (keys before RoPE), and per layer and K|V the distribution of "
                "the normalized coefficients. The file is bound to the model's fingerprint; both ends of a "
                "handoff must hold the same one.");
  flags.add_string("model", &f.model, "GGUF model file (with tokenizer metadata)", "FILE");
  flags.add_string("text-file", &f.text_file, "calibration text", "FILE");
  flags.add_string("output", &f.output, "the .batoncal file to write (also -o)", "FILE");
  flags.add_int64("chunk", &f.chunk, "tokens per prefilled chunk, BOS included");
  flags.add_bool("per-line", &f.per_line,
                 "tokenize each line on its own and concatenate without newlines (as `bench kv-quality`); "
                 "--no-per-line tokenizes the text whole");
  flags.add_int64("max-tokens", &f.max_tokens, "use at most this many text tokens (0: all)");
  flags.add_int64("threads", &f.threads, "engine threads (0: all)");
  flags.require("model");
  flags.require("text-file");
  flags.require("output");
  Args expanded = args;
  for (std::string& arg : expanded) {
    if (arg == "-o") arg = "--output";
  }
  if (std::optional<absl::Status> done = parse_flags(flags, expanded)) return *done;
  if (f.chunk < 2 || f.max_tokens < 0 || f.threads < 0) {
    return usage_error("model calibrate", "--chunk must be >= 2, --max-tokens and --threads >= 0");
  }
  const auto start = std::chrono::steady_clock::now();
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(f.model));
  BATON_ASSIGN_OR_RETURN(const std::vector<std::vector<int32_t>> chunks, text_chunks(*model, f));
  Engine engine(*model, EngineOptions{static_cast<int>(f.threads), 64});
  BATON_ASSIGN_OR_RETURN(const KvCalibration calibration,
                         calibrate_kv(*model, engine, chunks, std::filesystem::path(f.text_file).filename().string()));
  BATON_RETURN_IF_ERROR(save_kv_calibration(calibration, f.output));
  print_summary(calibration, f, chunks.size(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return absl::OkStatus();
}

}  // namespace baton::cli
