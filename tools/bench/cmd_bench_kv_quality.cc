// baton bench kv-quality: what a KV codec costs in model quality, measured
// through the real handoff (tools/cli/kv_quality.h says how; `baton model
// calibrate` measures its quality table the same way). The held-out text is
// tokenized and cut into chunks (BOS first when the tokenizer adds one).
// Output: bench_kv_quality_report.cc.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench_harness.h"
#include "bench_kv_quality.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/model/model_fingerprint.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/check.h"
#include "common/util/read_file.h"
#include "kv_codec_list.h"
#include "kv_quality.h"
#include "text_chunks.h"

namespace baton::cli {
namespace {

// Default variants; "G" stands for the group size min(32, head_dim), "G2"
// for twice that (variants whose group does not fit the model are reported
// as skipped).
constexpr char kDefaultCodecs[] =
    "f16-z3,int8-gG-z3,int8-pc-gG-z3,int8-gG-had-z3,int8-gG-pre-z3,"
    "int4-gG-z3,int4-pc-gG-z3,int4-gG-pre-z3,int4-pc-gG-pre-z3,int4-gG-had-z3,int4-pc-gG-had-z3,"
    "int4-gG2-z3,int4-gG2-had-z3,int4-k8-gG-z3,int4-pc-kg64-gG-z3,int4-pc-kg128-gG-z3,"
    "tc-b1,tc-b1.5,tc-b2,tc-b2.5,tc-b3,tc-b4";

// The run's report: the measurement with what it was run on.
KvQualityRun run_of(KvQualityMeasurement m, const ModelSpec& spec, const std::string& text_path, int64_t chunk,
                    size_t chunks, bool bos, int64_t greedy_tokens) {
  KvQualityRun result;
  result.model = spec.name;
  result.text_file = text_path;
  result.chunk_tokens = chunk;
  result.chunks = static_cast<int64_t>(chunks);
  result.scored_tokens = m.scored_tokens;
  result.bos = bos;
  result.prompts = m.prompts;
  result.greedy_tokens = greedy_tokens;
  result.f16_bytes_per_token = m.f16_bytes_per_token;
  result.baseline_codec = kKvQualityBaselineCodec;
  result.baseline_perplexity = m.baseline_perplexity;
  result.f32_local_perplexity = m.f32_local_perplexity;
  result.rows = std::move(m.rows);
  return result;
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

  std::shared_ptr<const KvCalibration> calibration;
  if (!calibration_path.empty()) {
    BATON_ASSIGN_OR_RETURN(const ModelFingerprint fingerprint, model_fingerprint(*m.model));
    BATON_ASSIGN_OR_RETURN(KvCalibration loaded, load_kv_calibration(calibration_path));
    if (loaded.model_digest != fingerprint.digest) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "--calibration %s is for model %s; --model %s is %s", calibration_path, loaded.model_digest, c.model,
          fingerprint.digest));
    }
    calibration = std::make_shared<const KvCalibration>(std::move(loaded));
  }
  const int head_dim = m.engine->kv_geometry().head_dim;
  const std::string list = codecs.empty() ? expand_codec_list(kDefaultCodecs, head_dim) : codecs;
  BATON_ASSIGN_OR_RETURN(KvQualityMeasurement measured,
                         measure_kv_quality(*m.model, *m.engine, chunks,
                                            std::vector<std::string>(absl::StrSplit(list, ',', absl::SkipEmpty())),
                                            calibration, KvQualityOptions{prompts, greedy_tokens}));
  const KvQualityRun result = run_of(std::move(measured), spec, text_path, chunk, chunks.size(), bos, greedy_tokens);
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
