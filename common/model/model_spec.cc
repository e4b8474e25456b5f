#include "common/model/model_spec.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/gguf/gguf_file.h"
#include "common/model/arch/arch.h"
#include "common/util/check.h"

namespace baton {
namespace {

// Integer metadata that must be in [min, max]; `fallback` < 0 means required.
absl::StatusOr<int> get_dim(const GgufFile& file, const std::string& key, int64_t fallback,
                            int64_t min, int64_t max) {
  int64_t value = fallback;
  if (file.find(key) != nullptr || fallback < 0) {
    BATON_ASSIGN_OR_RETURN(value, file.get_int(key));
  }
  if (value < min || value > max) {
    return absl::InvalidArgumentError(
        absl::StrFormat("metadata '%s' = %d is outside [%d, %d]", key, value, min, max));
  }
  return static_cast<int>(value);
}

absl::StatusOr<float> get_real(const GgufFile& file, const std::string& key, double fallback) {
  if (file.find(key) == nullptr) return static_cast<float>(fallback);
  BATON_ASSIGN_OR_RETURN(double value, file.get_float(key));
  return static_cast<float>(value);
}

}  // namespace

const char* rope_type_name(RopeType type) { return type == RopeType::kNorm ? "norm" : "neox"; }

const char* long_rope_factors_name(LongRopeFactors factors) {
  switch (factors) {
    case LongRopeFactors::kShort: return "short";
    case LongRopeFactors::kLong: return "long";
    case LongRopeFactors::kNone: break;
  }
  return "none";
}

absl::StatusOr<ModelSpec> model_spec_from_gguf(const GgufFile& file) {
  ModelSpec spec;
  BATON_ASSIGN_OR_RETURN(spec.arch, file.get_string("general.architecture"));
  const ArchTraits* traits = find_arch_traits(spec.arch);
  if (traits == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "architecture '%s' is not supported; supported: %s", spec.arch,
        absl::StrJoin(supported_arch_names(), ", ")));
  }
  if (file.find("general.name") != nullptr) {
    BATON_ASSIGN_OR_RETURN(spec.name, file.get_string("general.name"));
  }
  const std::string p = spec.arch + ".";
  BATON_ASSIGN_OR_RETURN(spec.n_layer, get_dim(file, p + "block_count", -1, 1, 1024));
  BATON_ASSIGN_OR_RETURN(spec.n_embd, get_dim(file, p + "embedding_length", -1, 1, 1 << 17));
  BATON_ASSIGN_OR_RETURN(spec.n_ff, get_dim(file, p + "feed_forward_length", -1, 1, 1 << 20));
  BATON_ASSIGN_OR_RETURN(spec.n_head, get_dim(file, p + "attention.head_count", -1, 1, 1024));
  BATON_ASSIGN_OR_RETURN(spec.n_head_kv,
                         get_dim(file, p + "attention.head_count_kv", spec.n_head, 1, spec.n_head));
  if (spec.n_head % spec.n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "attention.head_count %d is not a multiple of head_count_kv %d", spec.n_head, spec.n_head_kv));
  }
  BATON_ASSIGN_OR_RETURN(spec.head_dim, get_dim(file, p + "attention.key_length",
                                                spec.n_embd / spec.n_head, 2, 1024));
  if (file.find(p + "attention.value_length") != nullptr) {
    BATON_ASSIGN_OR_RETURN(int value_length, get_dim(file, p + "attention.value_length", -1, 1, 1024));
    if (value_length != spec.head_dim) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "attention.value_length %d differs from key_length %d; Baton needs them equal",
          value_length, spec.head_dim));
    }
  }
  BATON_ASSIGN_OR_RETURN(spec.n_ctx_train, get_dim(file, p + "context_length", 4096, 1, 1 << 24));
  BATON_ASSIGN_OR_RETURN(spec.norm_eps, get_real(file, p + "attention.layer_norm_rms_epsilon", 1e-5));

  spec.rope.type = traits->rope_type;
  BATON_ASSIGN_OR_RETURN(spec.rope.freq_base,
                         get_real(file, p + "rope.freq_base", traits->default_rope_freq_base));
  BATON_ASSIGN_OR_RETURN(spec.rope.n_rot,
                         get_dim(file, p + "rope.dimension_count", spec.head_dim, 2, spec.head_dim));
  if (spec.rope.n_rot % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rope.dimension_count %d must be even", spec.rope.n_rot));
  }
  if (file.find(p + "rope.scaling.type") != nullptr) {
    BATON_ASSIGN_OR_RETURN(spec.rope.scaling_type, file.get_string(p + "rope.scaling.type"));
  }
  if (spec.rope.scaling_type == "linear") {
    BATON_ASSIGN_OR_RETURN(spec.rope.scaling_factor, get_real(file, p + "rope.scaling.factor", 1.0));
    if (!(spec.rope.scaling_factor > 0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rope.scaling.factor %g must be positive", spec.rope.scaling_factor));
    }
  } else if (spec.rope.scaling_type != "none" && spec.rope.scaling_type != "llama3" &&
             spec.rope.scaling_type != "longrope" && spec.rope.scaling_type != "su") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rope.scaling.type '%s' is not supported (supported: none, linear, llama3 via rope_freqs, "
        "longrope via rope_factors_long/short)",
        spec.rope.scaling_type));
  }
  spec.qkv_bias = traits->qkv_bias;
  spec.qk_norm = traits->qk_norm;

  // Vocabulary size and tying come from the tensors themselves.
  const GgufTensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd == nullptr) return absl::InvalidArgumentError("tensor 'token_embd.weight' is missing");
  if (embd->dims.size() != 2 || embd->dims[0] != spec.n_embd) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor 'token_embd.weight' must be [%d, n_vocab]", spec.n_embd));
  }
  spec.n_vocab = static_cast<int>(embd->dims[1]);
  spec.tied_embeddings = file.find_tensor("output.weight") == nullptr;
  spec.rope.has_freq_factors = file.find_tensor("rope_freqs.weight") != nullptr;
  if (spec.rope.has_freq_factors && spec.rope.scaling_type == "none") spec.rope.scaling_type = "llama3";
  BATON_RETURN_IF_ERROR(read_long_rope(file, &spec));
  if (spec.rope.long_rope == LongRopeFactors::kNone &&
      (spec.rope.scaling_type == "longrope" || spec.rope.scaling_type == "su")) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rope.scaling.type '%s' needs the tensors rope_factors_long.weight and rope_factors_short.weight",
        spec.rope.scaling_type));
  }
  if (spec.arch == gemma3_arch_traits().name) BATON_RETURN_IF_ERROR(read_gemma3_spec(file, spec));
  return spec;
}

}  // namespace baton
