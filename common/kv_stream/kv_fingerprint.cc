#include "common/kv_stream/kv_fingerprint.h"

#include <algorithm>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/util/check.h"

namespace baton {
namespace {

std::string bool_text(bool b) { return b ? "true" : "false"; }

std::string digest_bytes(const Digest256& d) {
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

// Hex text -> raw bytes; nullopt when `hex` is not an even-length hex string.
std::optional<std::string> hex_to_bytes(const std::string& hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

std::string bytes_hex(const std::string& bytes) {
  return to_hex(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// Value of field `name`, or nullptr. (Kept here rather than using
// ModelFingerprint::find so that the KV stream code needs only the struct.)
const std::string* find_field(const FingerprintFields& fields, const std::string& name) {
  for (const auto& [key, value] : fields) {
    if (key == name) return &value;
  }
  return nullptr;
}

// Fills the readable typed copies of the canonical fields; unparsable values
// are left unset (the field list stays the authority).
void fill_typed_model_fields(const ModelFingerprint& model, v1::ModelFingerprint* proto) {
  auto find = [&](const char* name) { return find_field(model.fields, name); };
  auto u32 = [&](const char* name, void (v1::ModelFingerprint::*set)(uint32_t)) {
    uint32_t v = 0;
    const std::string* text = find(name);
    if (text != nullptr && absl::SimpleAtoi(*text, &v)) (proto->*set)(v);
  };
  u32("version", &v1::ModelFingerprint::set_version);
  u32("n_layer", &v1::ModelFingerprint::set_n_layer);
  u32("n_embd", &v1::ModelFingerprint::set_n_embd);
  u32("n_head", &v1::ModelFingerprint::set_n_head);
  u32("n_head_kv", &v1::ModelFingerprint::set_n_head_kv);
  u32("head_dim", &v1::ModelFingerprint::set_head_dim);
  u32("n_ff", &v1::ModelFingerprint::set_n_ff);
  u32("n_vocab", &v1::ModelFingerprint::set_n_vocab);
  if (const std::string* arch = find("arch")) proto->set_architecture(*arch);
  float f = 0;
  if (const std::string* eps = find("norm_eps"); eps && absl::SimpleAtof(*eps, &f)) proto->set_norm_eps(f);
  v1::RopeParams* rope = proto->mutable_rope();
  if (const std::string* type = find("rope.type")) {
    if (*type == "norm") rope->set_type(v1::ROPE_TYPE_NORM);
    if (*type == "neox") rope->set_type(v1::ROPE_TYPE_NEOX);
  }
  uint32_t n_rot = 0;
  if (const std::string* t = find("rope.n_rot"); t && absl::SimpleAtoi(*t, &n_rot)) rope->set_n_rot(n_rot);
  if (const std::string* t = find("rope.freq_base"); t && absl::SimpleAtof(*t, &f)) rope->set_freq_base(f);
  uint32_t original_context = 0;  // LongRoPE models only
  if (const std::string* t = find("rope.original_context"); t && absl::SimpleAtoi(*t, &original_context)) {
    rope->set_original_context(original_context);
  }
  if (const std::string* t = find("rope.scaling_factor"); t && absl::SimpleAtof(*t, &f)) {
    rope->set_scaling_factor(f);
  }
  if (const std::string* scaling = find("rope.scaling")) {
    if (*scaling == "none") rope->set_scaling(v1::ROPE_SCALING_NONE);
    if (*scaling == "linear") rope->set_scaling(v1::ROPE_SCALING_LINEAR);
    if (*scaling == "llama3") rope->set_scaling(v1::ROPE_SCALING_LLAMA3);
    if (*scaling == "yarn") rope->set_scaling(v1::ROPE_SCALING_YARN);
  }
  if (const std::string* t = find("tokenizer_digest")) {
    if (auto bytes = hex_to_bytes(*t)) proto->set_tokenizer_digest(*bytes);
  }
  if (const std::string* t = find("source_weights_digest")) {
    if (auto bytes = hex_to_bytes(*t)) proto->set_weights_digest(*bytes);
  }
}

// First differing field of two same-schema field lists, as
// "<what> mismatch: <name> is <ours> here, <theirs> in <their_name>".
absl::Status compare_fields(const char* what, const FingerprintFields& ours, const FingerprintFields& theirs,
                            const std::string& their_name) {
  for (size_t i = 0; i < ours.size() && i < theirs.size(); ++i) {
    if (ours[i] != theirs[i]) {
      return absl::FailedPreconditionError(absl::StrFormat("%s mismatch: %s is %s here, %s in %s", what,
                                                           ours[i].first, ours[i].second, theirs[i].second,
                                                           their_name));
    }
  }
  if (ours.size() != theirs.size()) {
    return absl::FailedPreconditionError(absl::StrFormat("%s mismatch: %d fields here, %d in %s", what,
                                                         ours.size(), theirs.size(), their_name));
  }
  return absl::OkStatus();
}

}  // namespace

std::string canonical_fields(const FingerprintFields& fields) {
  std::string out;
  for (const auto& [name, value] : fields) out += name + "=" + value + "\n";
  return out;
}

std::string kv_codec_name(int codec) {
  switch (codec) {
    case v1::KV_CODEC_UNSPECIFIED: return "unspecified";
    case v1::KV_CODEC_F16: return "f16";
    case v1::KV_CODEC_INT8: return "int8";
    case v1::KV_CODEC_INT4: return "int4";
    case v1::KV_CODEC_TC: return "tc";
    case v1::KV_CODEC_AUTO: return "auto";
    default: return absl::StrFormat("unknown(%d)", codec);
  }
}

std::string key_axis_name(int key_axis) {
  switch (key_axis) {
    case v1::KEY_AXIS_UNSPECIFIED: return "unspecified";
    case v1::KEY_AXIS_PER_TOKEN: return "per_token";
    case v1::KEY_AXIS_PER_CHANNEL: return "per_channel";
    default: return absl::StrFormat("unknown(%d)", key_axis);
  }
}

std::string kv_kind_name(int kind) {
  switch (kind) {
    case v1::KV_KIND_K: return "K";
    case v1::KV_KIND_V: return "V";
    default: return absl::StrFormat("unknown(%d)", kind);
  }
}

FingerprintFields KvFingerprint::context_fields() const {
  return {{"first_position", absl::StrFormat("%u", context.first_position)},
          {"token_count", absl::StrFormat("%u", context.token_count)},
          {"prefix_digest", to_hex(context.prefix_digest)}};
}

FingerprintFields KvFingerprint::codec_fields() const {
  const bool f16 = codec.codec() == v1::KV_CODEC_F16;
  // Key codec and key group resolved to their effective values, so that an
  // unset field and its explicit default fingerprint the same.
  const int key_codec = codec.key_codec() == v1::KV_CODEC_UNSPECIFIED ? codec.codec() : codec.key_codec();
  const uint32_t key_group = f16 ? 0u : (codec.key_group_size() != 0 ? codec.key_group_size() : codec.group_size());
  FingerprintFields fields = {
      {"codec", kv_codec_name(codec.codec())},
      {"key_codec", kv_codec_name(key_codec)},
      {"group_size", absl::StrFormat("%u", f16 ? 0u : codec.group_size())},
      {"key_group_size", absl::StrFormat("%u", key_group)},
      {"key_axis", key_axis_name(f16 ? v1::KEY_AXIS_UNSPECIFIED : codec.key_axis())},
      {"pre_rope_keys", bool_text(codec.pre_rope_keys())},
      {"hadamard_keys", bool_text(codec.hadamard_keys())},
      {"hadamard_values", bool_text(codec.hadamard_values())},
      {"zstd_level", codec.has_zstd_level() ? absl::StrFormat("%d", codec.zstd_level()) : "unset"}};
  if (codec.codec() == v1::KV_CODEC_TC) {
    // Only the transform codec has these, so every other codec's digest is
    // what it was before it existed.
    const v1::TransformCodecParams& t = codec.transform();
    fields.emplace_back("tc_budget_tenths", absl::StrFormat("%u", t.budget_tenths()));
    fields.emplace_back("tc_sink_tokens", absl::StrFormat("%u", t.sink_tokens()));
    fields.emplace_back("tc_recent_tokens", absl::StrFormat("%u", t.recent_tokens()));
    fields.emplace_back("tc_calibration", bytes_hex(t.calibration_sha256()));
  }
  return fields;
}

Digest256 KvFingerprint::model_digest() const { return sha256(canonical_fields(model.fields)); }
Digest256 KvFingerprint::context_digest() const { return sha256(canonical_fields(context_fields())); }
Digest256 KvFingerprint::codec_digest() const { return sha256(canonical_fields(codec_fields())); }

Digest256 KvFingerprint::digest() const {
  Sha256 h;
  for (const Digest256& part : {model_digest(), context_digest(), codec_digest()}) h.update(part.data(), part.size());
  return h.finish();
}

v1::ModelFingerprint model_fingerprint_to_proto(const ModelFingerprint& fingerprint) {
  v1::ModelFingerprint proto;
  proto.set_digest(digest_bytes(sha256(canonical_fields(fingerprint.fields))));
  for (const auto& [name, value] : fingerprint.fields) {
    v1::FingerprintField* field = proto.add_fields();
    field->set_name(name);
    field->set_value(value);
  }
  fill_typed_model_fields(fingerprint, &proto);
  return proto;
}

absl::StatusOr<ModelFingerprint> model_fingerprint_from_proto(const v1::ModelFingerprint& proto) {
  if (proto.fields_size() == 0) {
    return absl::InvalidArgumentError("model fingerprint carries no fields (ModelFingerprint.fields is empty)");
  }
  ModelFingerprint fp;
  fp.fields.reserve(static_cast<size_t>(proto.fields_size()));
  for (const v1::FingerprintField& field : proto.fields()) fp.fields.emplace_back(field.name(), field.value());
  const Digest256 digest = sha256(canonical_fields(fp.fields));
  if (proto.digest() != digest_bytes(digest)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model fingerprint digest %s does not match its fields (which hash to %s)", bytes_hex(proto.digest()),
        to_hex(digest)));
  }
  fp.digest = to_hex(digest);
  return fp;
}

v1::KvFingerprint kv_fingerprint_to_proto(const KvFingerprint& fingerprint) {
  v1::KvFingerprint proto;
  proto.set_version(fingerprint.version);
  proto.set_digest(digest_bytes(fingerprint.digest()));
  *proto.mutable_model() = model_fingerprint_to_proto(fingerprint.model);
  proto.set_context_digest(digest_bytes(fingerprint.context_digest()));
  proto.set_codec_digest(digest_bytes(fingerprint.codec_digest()));
  return proto;
}

void set_header_fingerprint(const KvFingerprint& fingerprint, v1::KvHeader* header) {
  *header->mutable_fingerprint() = kv_fingerprint_to_proto(fingerprint);
  *header->mutable_codec() = fingerprint.codec;
  header->set_first_position(fingerprint.context.first_position);
  header->set_token_count(fingerprint.context.token_count);
  header->set_prefix_digest(digest_bytes(fingerprint.context.prefix_digest));
}

absl::StatusOr<KvFingerprint> kv_fingerprint_from_header(const v1::KvHeader& header) {
  if (!header.has_fingerprint()) return absl::InvalidArgumentError("KV header has no fingerprint");
  const v1::KvFingerprint& proto = header.fingerprint();
  if (proto.version() != kKvFingerprintVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "fingerprint version is %u in the KV stream; this build reads version %u", proto.version(),
        kKvFingerprintVersion));
  }
  KvFingerprint fp;
  fp.version = proto.version();
  auto model = model_fingerprint_from_proto(proto.model());
  if (!model.ok()) return model.status();
  fp.model = *std::move(model);
  fp.context.first_position = header.first_position();
  fp.context.token_count = header.token_count();
  if (header.prefix_digest().size() != fp.context.prefix_digest.size()) {
    return absl::InvalidArgumentError(absl::StrFormat("KV header prefix_digest has %d bytes; expected %d",
                                                      header.prefix_digest().size(),
                                                      fp.context.prefix_digest.size()));
  }
  std::copy(header.prefix_digest().begin(), header.prefix_digest().end(), fp.context.prefix_digest.begin());
  fp.codec = header.codec();
  auto check_part = [](const char* part, const std::string& carried, const Digest256& computed,
                       const char* over) -> absl::Status {
    if (carried == digest_bytes(computed)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV header fingerprint %s is %s but %s hash to %s", part, bytes_hex(carried), over, to_hex(computed)));
  };
  BATON_RETURN_IF_ERROR(check_part("context_digest", proto.context_digest(), fp.context_digest(),
                                   "first_position/token_count/prefix_digest"));
  BATON_RETURN_IF_ERROR(check_part("codec_digest", proto.codec_digest(), fp.codec_digest(), "the codec params"));
  BATON_RETURN_IF_ERROR(check_part("digest", proto.digest(), fp.digest(), "its model/context/codec parts"));
  return fp;
}

absl::Status verify_kv_fingerprint(const KvFingerprint& ours, const KvFingerprint& theirs,
                                   const std::string& their_name) {
  if (ours.version != theirs.version) {
    return absl::FailedPreconditionError(absl::StrFormat("fingerprint version is %u here, %u in %s", ours.version,
                                                         theirs.version, their_name));
  }
  if (ours.model_digest() != theirs.model_digest()) {
    for (const auto& [name, value] : ours.model.fields) {
      const std::string* other = find_field(theirs.model.fields, name);
      if (other == nullptr) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "model fingerprint mismatch: %s is %s here and absent in %s", name, value, their_name));
      }
      if (*other != value) {
        return absl::FailedPreconditionError(absl::StrFormat("model fingerprint mismatch: %s is %s here, %s in %s",
                                                             name, value, *other, their_name));
      }
    }
    // A field only they have (e.g. layer_window: their model has sliding-window layers).
    for (const auto& [name, value] : theirs.model.fields) {
      if (find_field(ours.model.fields, name) == nullptr) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "model fingerprint mismatch: %s is absent here, %s in %s", name, value, their_name));
      }
    }
    return absl::FailedPreconditionError(absl::StrFormat("model fingerprint mismatch: digest %s here, %s in %s",
                                                         to_hex(ours.model_digest()),
                                                         to_hex(theirs.model_digest()), their_name));
  }
  BATON_RETURN_IF_ERROR(compare_fields("context", ours.context_fields(), theirs.context_fields(), their_name));
  BATON_RETURN_IF_ERROR(compare_fields("codec", ours.codec_fields(), theirs.codec_fields(), their_name));
  return absl::OkStatus();
}

}  // namespace baton
