// baton plan --model FILE --memory 8GiB: how a device's memory is shared
// between weights, scratch, headroom and KV, and the longest context each KV
// codec allows on that budget (edge_decode/plan/memory_plan.h, the same plan the
// agent reports in Health). --shape NAME sizes a known model shape without a
// file (weights estimated from the parameter count and --weights-type).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "commands.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/model/model.h"
#include "common/model/model_spec.h"
#include "common/model/synth_shapes.h"
#include "common/util/check.h"
#include "common/util/flags.h"
#include "edge_decode/plan/memory_plan.h"
#include "kv_codec_list.h"
#include "progress_line.h"
#include "report.h"

namespace baton::cli {
namespace {

// The lossless baseline, the INT8 default, the INT4 default, and the INT4
// variants users weigh against it (mixed INT8 keys; plain per-token groups).
// "G" is min(32, head_dim) (kv_codec_list.h).
constexpr char kPlanCodecs[] = "f16,int8-gG-z3,int4-pc-kg128-gG-z3,int4-k8-gG-z3,int4-gG-z3";

ModelSpec spec_of_shape(const SynthShape& shape) {
  ModelSpec spec;
  spec.arch = shape.arch;
  spec.name = shape.name;
  spec.n_layer = shape.n_layer;
  spec.n_embd = shape.n_embd;
  spec.n_head = shape.n_head;
  spec.n_head_kv = shape.n_head_kv;
  spec.head_dim = shape.head_dim;
  spec.n_ff = shape.n_ff;
  spec.n_vocab = shape.n_vocab;
  spec.n_ctx_train = shape.n_ctx_train;
  spec.norm_eps = shape.norm_eps;
  spec.tied_embeddings = shape.tied_embeddings;
  return spec;
}

// Matrix weights of a shape (norms are negligible): embeddings (twice unless
// tied) and per layer Q, K, V, O and the three FFN matrices.
uint64_t parameter_count(const ModelSpec& spec) {
  const uint64_t embd = uint64_t(spec.n_vocab) * uint64_t(spec.n_embd);
  const uint64_t attention = uint64_t(spec.n_embd) * uint64_t(2 * spec.q_dim() + 2 * spec.kv_dim());
  const uint64_t ffn = 3 * uint64_t(spec.n_embd) * uint64_t(spec.n_ff);
  return embd * (spec.tied_embeddings ? 1 : 2) + uint64_t(spec.n_layer) * (attention + ffn);
}

// Bytes per weight of a GGUF tensor type (blocks of 32 with an f16 scale).
absl::StatusOr<double> bytes_per_weight(const std::string& type) {
  if (type == "q4_0") return 18.0 / 32.0;
  if (type == "q8_0") return 34.0 / 32.0;
  if (type == "f16" || type == "bf16") return 2.0;
  if (type == "f32") return 4.0;
  return absl::InvalidArgumentError("--weights-type: '" + type + "' is not one of q4_0, q8_0, f16, bf16, f32");
}

// True when the trained context, not the KV budget, limits this codec.
bool capped_at_trained_context(const ModelSpec& spec, const EdgeMemoryPlan& plan, const CodecCapacityPlan& c) {
  return spec.n_ctx_train > 0 && c.max_context_tokens == static_cast<uint32_t>(spec.n_ctx_train) &&
         c.kv_window_bytes + c.kv_bytes_per_token * uint64_t(spec.n_ctx_train) <= plan.kv_budget_bytes;
}

// The codec rows: the wire codec as named, the form the device keeps it in
// (no zstd; per-channel keys are regrouped per token on the device), KV
// bytes per token and the max context; then one line per codec saying what
// its name means. When the trained context limits every codec, that is said
// once and the rows show the KV of a full context instead.
void print_codec_table(const ModelSpec& spec, const EdgeMemoryPlan& plan, const std::vector<KvCodecConfig>& codecs,
                       const KvCodecConfig& agent_default) {
  bool all_capped = plan.kv_budget_bytes > 0;
  for (const CodecCapacityPlan& c : plan.capacity) all_capped = all_capped && capped_at_trained_context(spec, plan, c);
  std::printf("\n  %-26s %-14s %14s %18s\n", "KV codec", "stored as", "KV per token",
              all_capped ? "KV at max context" : "max context");
  for (size_t i = 0; i < plan.capacity.size(); ++i) {
    const CodecCapacityPlan& c = plan.capacity[i];
    const std::string name = codecs[i].to_string() + (codecs[i] == agent_default ? " *" : "");
    const std::string last =
        all_capped ? format_bytes(c.kv_bytes_per_token * uint64_t(spec.n_ctx_train))
                   : absl::StrFormat("%u tokens%s", c.max_context_tokens,
                                     capped_at_trained_context(spec, plan, c) ? " (trained context)" : "");
    std::printf("  %-26s %-14s %14s %18s\n", name.c_str(), c.codec.to_string().c_str(),
                format_bytes(c.kv_bytes_per_token).c_str(), last.c_str());
  }
  if (all_capped) {
    std::printf("\n  max context: %d tokens with every codec: the model's trained context is the limit, not memory\n",
                spec.n_ctx_train);
  }
  std::printf("\n  * the agent's default codec without a quality table (int4: baton-edge --codec int4, and --codec auto's "
              "fallback; --codec auto, the default under --policy auto, picks per request from the KV "
              "calibration's quality table and the measured link)\n");
  for (const KvCodecConfig& codec : codecs) {
    std::printf("  %-26s %s\n", codec.to_string().c_str(), describe_codec(codec).c_str());
  }
}

// The model the plan is for: a GGUF file (`model` set, weights exact) or a
// known shape (weights estimated from the parameter count and the type).
struct PlanModel {
  ModelSpec spec;
  uint64_t weights_bytes = 0;
  std::unique_ptr<Model> model;
};

absl::StatusOr<PlanModel> load_plan_model(const std::string& model_path, const std::string& shape_name,
                                          const std::string& weights_type) {
  PlanModel m;
  if (!model_path.empty()) {
    BATON_ASSIGN_OR_RETURN(m.model, Model::Load(model_path));
    m.spec = m.model->spec();
    return m;
  }
  const SynthShape* shape = find_synth_shape(shape_name);
  if (shape == nullptr) {
    return usage_error("plan", "--shape: unknown shape '" + shape_name + "' (known: " + synth_shape_names() + ")");
  }
  absl::StatusOr<double> per_weight = bytes_per_weight(weights_type);
  if (!per_weight.ok()) return usage_error("plan", std::string(per_weight.status().message()));
  m.spec = spec_of_shape(*shape);
  m.weights_bytes = static_cast<uint64_t>(static_cast<double>(parameter_count(m.spec)) * *per_weight);
  return m;
}

// The codecs of --codecs (G expanded for the model), each valid for it.
absl::StatusOr<std::vector<KvCodecConfig>> plan_codecs(const std::string& codec_list, const ModelSpec& spec) {
  std::vector<KvCodecConfig> codecs;
  const std::string names = expand_codec_list(codec_list.empty() ? kPlanCodecs : codec_list, spec.head_dim);
  for (absl::string_view name : absl::StrSplit(names, ',', absl::SkipEmpty())) {
    absl::StatusOr<KvCodecConfig> codec = parse_kv_codec_config(std::string_view(name.data(), name.size()));
    if (!codec.ok()) return usage_error("plan", "--codecs: " + std::string(codec.status().message()));
    const KvGeometry geometry = kv_geometry_for(spec);
    if (absl::Status fits = codec->validate(geometry); !fits.ok()) {
      return usage_error("plan", absl::StrFormat("--codecs: %s: %s", std::string(name), fits.message()));
    }
    codecs.push_back(*codec);
  }
  if (codecs.empty()) return usage_error("plan", "--codecs: the list is empty");
  return codecs;
}

// --json: the fixed figures, then one entry per codec.
void print_plan_json(const PlanModel& m, const EdgeMemoryPlan& plan, const std::vector<KvCodecConfig>& codecs,
                     const KvCodecConfig& agent_default, uint64_t memory_bytes, bool detected) {
  const ModelSpec& spec = m.spec;
  Json out = {{"model", spec.name},
              {"memory_bytes", memory_bytes},
              {"detected", detected},
              {"weights_bytes", plan.weights_bytes},
              {"weights_estimated", m.model == nullptr},
              {"scratch_bytes", plan.scratch_bytes},
              {"headroom_bytes", plan.headroom_bytes},
              {"kv_budget_bytes", plan.kv_budget_bytes},
              {"n_ctx_train", spec.n_ctx_train},
              {"codecs", Json::array()}};
  for (size_t i = 0; i < plan.capacity.size(); ++i) {
    const CodecCapacityPlan& c = plan.capacity[i];
    out["codecs"].push_back({{"codec", codecs[i].to_string()},
                             {"stored_as", c.codec.to_string()},
                             {"kv_bytes_per_token", c.kv_bytes_per_token},
                             {"max_context_tokens", c.max_context_tokens},
                             {"limited_by", capped_at_trained_context(spec, plan, c) ? "trained_context" : "memory"},
                             {"agent_default", codecs[i] == agent_default},
                             {"meaning", describe_codec(codecs[i])}});
  }
  print_json_line(out);
}

// The table: the memory split, then one row per codec.
void print_plan_table(const PlanModel& m, const EdgeMemoryPlan& plan, const std::vector<KvCodecConfig>& codecs,
                      const KvCodecConfig& agent_default, uint64_t memory_bytes, bool detected) {
  const ModelSpec& spec = m.spec;
  Report r(absl::StrFormat("memory plan: %s on %s%s", spec.name.empty() ? spec.arch : spec.name,
                           format_bytes(memory_bytes), detected ? " (detected)" : ""));
  r.add_bytes("device_limit", "device memory limit", plan.device_limit_bytes);
  r.add_bytes("weights", m.model ? "weights" : "weights (estimated)", plan.weights_bytes);
  r.add_bytes("scratch", "runtime scratch", plan.scratch_bytes);
  r.add_bytes("headroom", "headroom", plan.headroom_bytes);
  r.add_bytes("kv_budget", "KV budget", plan.kv_budget_bytes);
  r.add_int("n_ctx_train", "trained context", spec.n_ctx_train, "tokens");
  r.print_table(stdout);
  print_codec_table(spec, plan, codecs, agent_default);
  if (plan.kv_budget_bytes == 0) {
    std::printf("\n  weights + scratch + headroom do not fit in %s: no room for KV\n",
                format_bytes(memory_bytes).c_str());
  }
}

}  // namespace

absl::Status plan_command(const Args& args) {
  std::string model_path, shape_name, weights_type = "q4_0", codec_list;
  uint64_t memory_bytes = 0;
  bool json = false;
  FlagSet flags("baton plan", "--model FILE | --shape NAME [--memory SIZE] [flags]",
                "Prints the edge memory plan for a model: weights, runtime scratch, headroom, the KV "
                "budget that is left, KV bytes per token for each codec and the longest context each "
                "codec fits (capped at the model's trained context). --memory 0 uses this machine's "
                "available memory (cgroup limit or MemAvailable), as baton-edge does.");
  flags.add_string("model", &model_path, "GGUF model file", "FILE");
  flags.add_string("shape", &shape_name, "a known shape instead of a file: " + synth_shape_names(), "NAME");
  flags.add_string("weights-type", &weights_type, "with --shape: q4_0, q8_0, f16, bf16 or f32", "TYPE");
  flags.add_size("memory", &memory_bytes, "device memory for Baton (e.g. 8GiB); 0: detect");
  flags.add_string("codecs", &codec_list,
                   "comma-separated KV codecs; G = min(32, head_dim) (default: " + std::string(kPlanCodecs) + ")",
                   "LIST");
  flags.add_bool("json", &json, "print one JSON object");
  if (std::optional<absl::Status> done = parse_flags(flags, args)) return *done;
  if (model_path.empty() == shape_name.empty()) {
    return usage_error("plan", "give exactly one of --model FILE, --shape NAME");
  }
  if (!flags.positional().empty()) {
    return usage_error("plan", "unexpected argument '" + flags.positional().front() + "'");
  }
  BATON_ASSIGN_OR_RETURN(PlanModel m, load_plan_model(model_path, shape_name, weights_type));
  BATON_ASSIGN_OR_RETURN(std::vector<KvCodecConfig> codecs, plan_codecs(codec_list, m.spec));
  // What baton-edge keeps with --codec int4, and under --codec auto (the
  // default under --policy auto) without a quality table.
  const KvCodecConfig agent_default = default_kv_codec_config(KvCodecConfig::Bits::kInt4, kv_geometry_for(m.spec));
  const bool detected = memory_bytes == 0;
  if (detected) {
    memory_bytes = detect_device_memory_bytes();
    if (memory_bytes == 0) {
      return absl::FailedPreconditionError("cannot detect this machine's memory; give --memory SIZE");
    }
  }
  const EdgeMemoryPlan plan = m.model ? make_memory_plan(*m.model, memory_bytes, codecs)
                                      : make_memory_plan(m.spec, m.weights_bytes, memory_bytes, codecs);
  if (json) {
    print_plan_json(m, plan, codecs, agent_default, memory_bytes, detected);
  } else {
    print_plan_table(m, plan, codecs, agent_default, memory_bytes, detected);
  }
  return absl::OkStatus();
}

}  // namespace baton::cli
