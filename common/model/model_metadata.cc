#include "common/model/model_metadata.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/gguf/gguf_file.h"
#include "common/util/check.h"

namespace baton {

void hash_gguf_value(Sha256& hash, const GgufValue& value) {
  hash.update_u64(static_cast<uint64_t>(value.type()));
  if (value.is_array()) {
    hash.update_u64(static_cast<uint64_t>(value.array_type()));
    hash.update_u64(value.array().size());
    for (const GgufValue& element : value.array()) hash_gguf_value(hash, element);
  } else if (value.type() == GgufValueType::kString) {
    hash.update_field(*value.as_string());
  } else {
    hash.update_u64(value.raw_bits());
  }
}

Digest256 compute_weights_digest(const GgufFile& file) {
  std::vector<const GgufTensorInfo*> tensors;
  for (const GgufTensorInfo& t : file.tensors()) tensors.push_back(&t);
  std::sort(tensors.begin(), tensors.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->name < b->name; });
  Sha256 hash;
  hash.update_field("baton-weights/1");
  for (const GgufTensorInfo* t : tensors) {
    hash.update_field(t->name);
    hash.update_u64(static_cast<uint64_t>(t->type));
    hash.update_u64(t->dims.size());
    for (int64_t d : t->dims) hash.update_u64(static_cast<uint64_t>(d));
    hash.update_u64(t->n_bytes);
    hash.update(t->data, t->n_bytes);
  }
  return hash.finish();
}

absl::StatusOr<std::string> source_weights_digest(const GgufFile& file) {
  if (file.find(kSourceWeightsDigestKey) != nullptr) {
    BATON_ASSIGN_OR_RETURN(std::string digest, file.get_string(kSourceWeightsDigestKey));
    if (digest.size() != 64 || digest.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "metadata '%s' = '%s' is not a hex SHA-256", kSourceWeightsDigestKey, digest));
    }
    return digest;
  }
  return to_hex(compute_weights_digest(file));
}

Digest256 tokenizer_digest(const GgufFile& file) {
  std::vector<const std::pair<std::string, GgufValue>*> entries;
  for (const auto& entry : file.metadata()) {
    if (absl::StartsWith(entry.first, "tokenizer.ggml.")) entries.push_back(&entry);
  }
  std::sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
  Sha256 hash;
  hash.update_field("baton-tokenizer/1");
  for (const auto* entry : entries) {
    hash.update_field(entry->first);
    hash_gguf_value(hash, entry->second);
  }
  return hash.finish();
}

}  // namespace baton
