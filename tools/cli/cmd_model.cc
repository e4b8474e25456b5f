// baton model synth | quantize | info (verify, calibrate: their own files)
#include <chrono>
#include <cstdio>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "commands.h"
#include "common/gguf/gguf_file.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/model/model_quantize.h"
#include "common/model/quant_mix.h"
#include "common/model/model_synth.h"
#include "common/util/check.h"
#include "common/util/flags.h"
#include "edge_decode/plan/memory_plan.h"
#include "report.h"

namespace baton::cli {
namespace {

absl::StatusOr<GgmlType> parse_type(const std::string& name) {
  if (name == "f32") return GgmlType::kF32;
  if (name == "f16") return GgmlType::kF16;
  if (name == "bf16") return GgmlType::kBF16;
  if (name == "q8_0") return GgmlType::kQ8_0;
  if (name == "q4_0") return GgmlType::kQ4_0;
  return absl::InvalidArgumentError(
      absl::StrFormat("--type: '%s' is not one of f32, f16, bf16, q8_0, q4_0", name));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

absl::Status synth(const Args& args) {
  std::string shape_name = "tiny", type_name = "f16", out;
  int64_t seed = 0, threads = 0;
  FlagSet flags("baton model synth", "--shape NAME --type TYPE --seed N -o FILE",
                "Writes a seeded synthetic model of a real shape: random weights scaled so "
                "activations stay finite, and a synthetic llama-style vocabulary of the shape's size. "
                "Shapes: " + synth_shape_names() + ".");
  flags.add_string("shape", &shape_name, "model shape", "NAME");
  flags.add_string("type", &type_name, "type of the weight matrices: f32|f16|bf16|q8_0|q4_0", "TYPE");
  flags.add_int64("seed", &seed, "random seed (same shape + seed = same source weights)");
  flags.add_string("output", &out, "output GGUF file (also -o)", "FILE");
  flags.add_int64("threads", &threads, "threads (0: all)");
  flags.require("output");
  Args expanded = args;
  for (std::string& arg : expanded) {
    if (arg == "-o") arg = "--output";
  }
  if (std::optional<absl::Status> done = parse_flags(flags, expanded)) return *done;
  const SynthShape* shape = find_synth_shape(shape_name);
  if (shape == nullptr) {
    return exit_status(2, absl::StrFormat("baton model synth: unknown shape '%s' (shapes: %s)\n", shape_name,
                                          synth_shape_names()));
  }
  BATON_ASSIGN_OR_RETURN(GgmlType type, parse_type(type_name));
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = synthesize_model(
      *shape, SynthOptions{type, static_cast<uint64_t>(seed), static_cast<int>(threads)}, out);
  if (!status.ok()) return status;
  std::printf("wrote %s (%s, %s, seed %lld) in %.1f s\n", out.c_str(), shape_name.c_str(),
              type_name.c_str(), static_cast<long long>(seed), seconds_since(start));
  return absl::OkStatus();
}

absl::Status quantize(const Args& args) {
  std::string type_name = "q4_0", output_type_name;
  int64_t threads = 0;
  FlagSet flags("baton model quantize",
                "IN.gguf OUT.gguf [--type q4_0|q8_0|q4_k_m|q5_k_m|q6_k|f16|bf16|f32] [--output-type TYPE] "
                "[--threads N]",
                "Re-stores the weight matrices of IN in --type and stamps the source weights' digest into OUT, "
                "so both have the same model fingerprint.\n"
                "IN: a GGUF model the engine can run (architecture llama, qwen2, qwen3, phi3 or gemma3; tensors in f32, f16, bf16, "
                "q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K or q6_K), e.g. deploy/models/baton-tiny-kjv-f16.gguf "
                "or one made by 'baton model synth'. OUT: the GGUF file to write (not IN).\n"
                "Types: q4_0 (4.5 bits/weight: the edge's format), q8_0 (8.5 bits/weight), f16, bf16, f32 "
                "(conversions): every 2-D matrix in that type (1-D tensors such as norms as f32; a matrix whose "
                "rows are not whole blocks stays f32).\n"
                "q4_k_m, q5_k_m, q6_k: llama.cpp's K-quant mixes, tensor for tensor and byte for byte what "
                "llama-quantize writes without an importance matrix: output.weight q6_K; for _m, attn_v and "
                "ffn_down q6_K on the first and last eighth of the layers and every third between; rows that "
                "are not a multiple of 256 fall back to q5_0 / q5_1 / q8_0; norms kept as they are.");
  flags.add_string("type", &type_name, "target type: " + quant_recipe_names(), "TYPE");
  flags.add_string("output-type", &output_type_name,
                   "type of output.weight (a tied token_embd.weight) instead (llama-quantize's "
                   "--output-tensor-type): q6_k with --type q4_0 gives llama.cpp's default Q4_0 file",
                   "TYPE");
  flags.add_int64("threads", &threads, "threads (0: all)");
  if (std::optional<absl::Status> done = parse_flags(flags, args)) return *done;
  if (flags.positional().size() != 2) {
    return exit_status(2, "baton model quantize: expected IN and OUT files (see --help)\n");
  }
  absl::StatusOr<QuantRecipe> recipe = parse_quant_recipe(type_name);
  if (!recipe.ok()) return recipe.status();
  QuantizeOptions options{recipe->base, static_cast<int>(threads), recipe->mix, std::nullopt};
  if (!output_type_name.empty()) {
    auto output = parse_quant_recipe(output_type_name);
    if (!output.ok() || output->mix == QuantMix::kLlamaQ4_K_M || output->mix == QuantMix::kLlamaQ5_K_M) {
      return absl::InvalidArgumentError("--output-type: '" + output_type_name +
                                        "' is not one of q4_0, q8_0, q6_k, f16, bf16, f32");
    }
    options.output_type = output->base;
  }
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = quantize_model(flags.positional()[0], flags.positional()[1], options);
  if (!status.ok()) return status;
  std::printf("wrote %s (%s) in %.1f s\n", flags.positional()[1].c_str(), type_name.c_str(),
              seconds_since(start));
  return absl::OkStatus();
}

absl::Status info(const Args& args) {
  bool json = false;
  FlagSet flags("baton model info", "FILE [--json]",
                "Architecture, shapes, parameter count, bytes by tensor type, KV bytes per token "
                "and the model fingerprint of a GGUF model.");
  flags.add_bool("json", &json, "one JSON object instead of the table");
  if (std::optional<absl::Status> done = parse_flags(flags, args)) return *done;
  if (flags.positional().size() != 1) {
    return exit_status(2, "baton model info: expected one FILE\n");
  }
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(flags.positional()[0]);
  if (!model.ok()) return model.status();
  absl::StatusOr<ModelFingerprint> fingerprint = model_fingerprint(**model);
  if (!fingerprint.ok()) return fingerprint.status();
  const ModelSpec& s = (*model)->spec();

  Report r("model " + flags.positional()[0]);
  r.add_text("architecture", "architecture", s.arch);
  r.add_text("name", "name", s.name);
  r.add_int("n_layer", "layers", s.n_layer);
  r.add_int("n_embd", "embedding width", s.n_embd);
  r.add_int("n_head", "query heads", s.n_head);
  r.add_int("n_head_kv", "key/value heads", s.n_head_kv);
  r.add_int("head_dim", "head dim", s.head_dim);
  r.add_int("n_ff", "ffn width", s.n_ff);
  r.add_int("n_vocab", "vocabulary", s.n_vocab);
  r.add_int("n_ctx_train", "trained context", s.n_ctx_train, "tokens");
  std::string rope = absl::StrFormat("%s, base %g, %d dims, scaling %s", rope_type_name(s.rope.type),
                                     s.rope.freq_base, s.rope.n_rot, s.rope.scaling_type);
  if (s.rope.long_rope != LongRopeFactors::kNone) {
    absl::StrAppendFormat(&rope, " (%s factors: context %d vs original %d; attention factor %.4g)",
                          long_rope_factors_name(s.rope.long_rope), s.n_ctx_train, s.rope.original_context,
                          s.rope.attn_factor);
  }
  r.add_text("rope", "rope", rope);
  if (s.qk_norm) r.add_text("qk_norm", "QK-norm", "yes");
  r.add_text("tied_embeddings", "tied embeddings", s.tied_embeddings ? "yes" : "no");
  r.add_int("parameter_count", "parameters", (*model)->parameter_count());
  r.add_bytes("weight_bytes", "weights", (*model)->weight_bytes());
  std::map<std::string, uint64_t> by_type;
  for (const GgufTensorInfo& t : (*model)->file().tensors()) by_type[std::string(ggml_type_name(t.type))] += t.n_bytes;
  for (const auto& [type, bytes] : by_type) r.add_bytes("bytes_" + type, "  in " + type, bytes);
  std::vector<GgmlType> tensor_types;
  for (const GgufTensorInfo& t : (*model)->file().tensors()) tensor_types.push_back(t.type);
  r.add_text("tensor_types", "tensors", tensor_type_counts(tensor_types));
  // KV per token on the device for the agent's codec of each width (as
  // `baton plan` and Health count it: codes plus group scales and minimums).
  const KvGeometry geometry = kv_geometry_for(s);
  for (const auto& [key, bits] : {std::pair{"f16", KvCodecConfig::Bits::kF16},
                                  std::pair{"int8", KvCodecConfig::Bits::kInt8},
                                  std::pair{"int4", KvCodecConfig::Bits::kInt4}}) {
    const KvCodecConfig store = QuantizedKvCache::store_config_for(default_kv_codec_config(bits, geometry));
    r.add_bytes(std::string("kv_bytes_per_token_") + key, "KV per token " + store.to_string(),
                kv_bytes_per_token(store, s));
  }
  r.add_text("fingerprint", "model fingerprint", fingerprint->digest);
  r.add_text("tokenizer_digest", "tokenizer digest", *fingerprint->find("tokenizer_digest"));
  r.add_text("source_weights_digest", "source weights digest", *fingerprint->find("source_weights_digest"));
  r.print(json);
  return absl::OkStatus();
}

}  // namespace

absl::Status model_command(const Args& args) {
  const char* usage =
      "usage: baton model synth|quantize|info|verify|calibrate ...\n"
      "  synth     write a seeded synthetic model of a real shape\n"
      "  quantize  IN OUT --type q4_0|q8_0|f16|bf16|f32: re-store a model's matrices, stamping its source digest\n"
      "  info      shapes, sizes, KV bytes per token and fingerprint of a model\n"
      "  verify    the fast engine's logits against the golden reference engine on a model\n"
      "  calibrate --model F --text-file T -o OUT.batoncal: the transform KV codec's calibration (PCA per KV head)\n";
  if (std::optional<absl::Status> help = subcommand_help(args, usage, /*help_word=*/false)) return *help;
  const Args rest(args.begin() + 1, args.end());
  if (args[0] == "synth") return synth(rest);
  if (args[0] == "quantize") return quantize(rest);
  if (args[0] == "info") return info(rest);
  if (args[0] == "verify") return model_verify(rest);
  if (args[0] == "calibrate") return model_calibrate(rest);
  return exit_status(2, absl::StrCat("baton model: unknown subcommand '", args[0], "'\n", usage));
}

}  // namespace baton::cli
