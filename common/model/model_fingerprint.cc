#include "common/model/model_fingerprint.h"

#include "absl/strings/str_format.h"
#include "common/model/layer_window.h"
#include "common/model/model.h"
#include "common/model/model_metadata.h"
#include "common/util/check.h"
#include "common/util/sha256.h"

namespace baton {

const std::string* ModelFingerprint::find(const std::string& name) const {
  for (const auto& [key, value] : fields) {
    if (key == name) return &value;
  }
  return nullptr;
}

std::string ModelFingerprint::canonical() const {
  std::string out;
  for (const auto& [key, value] : fields) out += key + "=" + value + "\n";
  return out;
}

absl::StatusOr<ModelFingerprint> model_fingerprint(const Model& model) {
  const ModelSpec& s = model.spec();
  ModelFingerprint fp;
  auto add = [&](std::string name, std::string value) { fp.fields.emplace_back(std::move(name), std::move(value)); };
  add("version", absl::StrFormat("%d", kModelFingerprintVersion));
  add("arch", s.arch);
  add("n_layer", absl::StrFormat("%d", s.n_layer));
  add("n_embd", absl::StrFormat("%d", s.n_embd));
  add("n_head", absl::StrFormat("%d", s.n_head));
  add("n_head_kv", absl::StrFormat("%d", s.n_head_kv));
  add("head_dim", absl::StrFormat("%d", s.head_dim));
  add("n_ff", absl::StrFormat("%d", s.n_ff));
  add("n_vocab", absl::StrFormat("%d", s.n_vocab));
  add("norm_eps", absl::StrFormat("%.9g", s.norm_eps));
  add("rope.type", rope_type_name(s.rope.type));
  add("rope.freq_base", absl::StrFormat("%.9g", s.rope.freq_base));
  add("rope.n_rot", absl::StrFormat("%d", s.rope.n_rot));
  add("rope.scaling", s.rope.scaling_type);
  add("rope.scaling_factor", absl::StrFormat("%.9g", s.rope.scaling_factor));
  // Fields that only some architectures have are listed only when present, so
  // the fingerprints of llama / qwen2 models are unchanged.
  if (s.rope.long_rope != LongRopeFactors::kNone) {
    // Which LongRoPE set runs (its values are in rope.inv_freq_digest; named
    // first so a mismatch says which set) and the magnitude factor: both
    // change every stored key.
    add("rope.long_rope", long_rope_factors_name(s.rope.long_rope));
    add("rope.original_context", absl::StrFormat("%d", s.rope.original_context));
    add("rope.attn_factor", absl::StrFormat("%.9g", s.rope.attn_factor));
  }
  // The effective per-pair frequencies capture base, factors and scaling.
  auto table_digest = [](const std::vector<float>& inv_freq) {
    return to_hex(sha256(std::string_view(reinterpret_cast<const char*>(inv_freq.data()),
                                          inv_freq.size() * sizeof(float))))
        .substr(0, 16);
  };
  add("rope.inv_freq_digest", table_digest(model.rope_inv_freq()));
  add("qkv_bias", s.qkv_bias ? "true" : "false");
  if (s.qk_norm) add("qk_norm", "true");
  add("tied_embeddings", s.tied_embeddings ? "true" : "false");
  // Only windowed models carry the field, so full-attention digests are unchanged.
  if (has_sliding_window(s.layer_window)) add("layer_window", layer_window_text(s.layer_window));
  if (!model.rope_swa_inv_freq().empty()) add("rope.swa_inv_freq_digest", table_digest(model.rope_swa_inv_freq()));
  if (s.qk_norm) add("qk_norm", "true");
  add("tokenizer_digest", to_hex(tokenizer_digest(model.file())));
  BATON_ASSIGN_OR_RETURN(std::string weights, source_weights_digest(model.file()));
  add("source_weights_digest", weights);
  fp.digest = to_hex(sha256(fp.canonical()));
  return fp;
}

absl::Status compare_model_fingerprints(const ModelFingerprint& ours, const ModelFingerprint& theirs,
                                        const std::string& their_name) {
  if (ours.digest == theirs.digest) return absl::OkStatus();
  for (const auto& [key, value] : ours.fields) {
    const std::string* other = theirs.find(key);
    if (other == nullptr) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "model fingerprint mismatch: field '%s' is '%s' here and absent in %s", key, value, their_name));
    }
    if (*other != value) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "model fingerprint mismatch: %s is '%s' here, '%s' in %s", key, value, *other, their_name));
    }
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "model fingerprint mismatch: digest %s here, %s in %s", ours.digest, theirs.digest, their_name));
}

}  // namespace baton
