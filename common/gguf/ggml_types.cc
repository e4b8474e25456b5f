#include "common/gguf/ggml_types.h"

namespace baton {

bool ggml_type_supported(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0:
    case GgmlType::kBF16:
      return true;
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
    default: break;  // not (yet) supported: handled below
  }
  // Names of common ggml types we do not support, so errors read well.
  switch (type) {
    case 3: return "q4_1";
    case 6: return "q5_0";
    case 7: return "q5_1";
    case 10: return "q2_K";
    case 11: return "q3_K";
    case 12: return "q4_K";
    case 13: return "q5_K";
    case 14: return "q6_K";
    case 15: return "q8_K";
    default: return "unknown";
  }
}

int64_t ggml_block_elements(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0: return kQK4_0;
    case GgmlType::kQ8_0: return kQK8_0;
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
    default: break;  // not (yet) supported: handled below
  }
  return 0;
}

}  // namespace baton
