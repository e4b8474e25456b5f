#include "common/gguf/ggml_types.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(GgmlTypes, RowBytesMatchGgmlBlockSizes) {
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ4_0, 64), 36);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ8_0, 64), 68);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kF16, 64), 128);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kBF16, 64), 128);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kF32, 64), 256);
}

TEST(GgmlTypes, UnsupportedTypesAreNamed) {
  EXPECT_FALSE(ggml_type_supported(10));
  EXPECT_EQ(ggml_type_name(10), "q2_K");
  EXPECT_TRUE(ggml_type_supported(12));
  EXPECT_EQ(ggml_type_name(12), "q4_K");
  EXPECT_FALSE(ggml_type_supported(15));  // q8_K: activations only
  EXPECT_TRUE(ggml_type_supported(30));
  EXPECT_EQ(ggml_type_name(30), "bf16");
}

}  // namespace
}  // namespace baton
