#include "common/gguf/ggml_types.h"

namespace baton {

bool ggml_type_supported(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0:
    case GgmlType::kBF16:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return true;
    case GgmlType::kQ8_K:  // activations only: never a stored tensor type
      return false;
    default: break;  // not (yet) supported: handled below
  }
  return false;
}

std::string_view ggml_type_name(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32: return "f32";
    case GgmlType::kF16: return "f16";
    case GgmlType::kQ4_0: return "q4_0";
    case GgmlType::kQ8_0: return "q8_0";
    case GgmlType::kBF16: return "bf16";
    case GgmlType::kQ4_1: return "q4_1";
    case GgmlType::kQ5_0: return "q5_0";
    case GgmlType::kQ5_1: return "q5_1";
    case GgmlType::kQ4_K: return "q4_K";
    case GgmlType::kQ5_K: return "q5_K";
    case GgmlType::kQ6_K: return "q6_K";
    case GgmlType::kQ8_K: return "q8_K";
    default: break;  // not (yet) supported: handled below
  }
  // Names of common ggml types we do not support, so errors read well.
  switch (type) {
    case 10: return "q2_K";
    case 11: return "q3_K";
    default: return "unknown";
  }
}

int64_t ggml_block_elements(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0: return kQK4_0;
    case GgmlType::kQ8_0: return kQK8_0;
    case GgmlType::kQ4_1: return kQK4_1;
    case GgmlType::kQ5_0: return kQK5_0;
    case GgmlType::kQ5_1: return kQK5_1;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kQ8_K:
      return kQK_K;
    default: return 1;
  }
}

int64_t ggml_block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return 4;
    case GgmlType::kF16: return 2;
    case GgmlType::kBF16: return 2;
    case GgmlType::kQ4_0: return sizeof(BlockQ4_0);
    case GgmlType::kQ8_0: return sizeof(BlockQ8_0);
    case GgmlType::kQ4_1: return sizeof(BlockQ4_1);
    case GgmlType::kQ5_0: return sizeof(BlockQ5_0);
    case GgmlType::kQ5_1: return sizeof(BlockQ5_1);
    case GgmlType::kQ4_K: return sizeof(BlockQ4_K);
    case GgmlType::kQ5_K: return sizeof(BlockQ5_K);
    case GgmlType::kQ6_K: return sizeof(BlockQ6_K);
    case GgmlType::kQ8_K: return sizeof(BlockQ8_K);
    default: break;  // not (yet) supported: handled below
  }
  return 0;
}

}  // namespace baton
