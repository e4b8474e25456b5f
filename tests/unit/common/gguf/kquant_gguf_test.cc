// The GGUF reader sizes K-quant tensors by their blocks (144 / 176 / 210 bytes
// per 256 elements) and checks them against the file: a truncated K-quant
// tensor, a row that is not whole super-blocks and a hostile element count are
// refused with an error naming the tensor, never read past the end. Fails if
// the reader sized K-quant tensors as 1 byte per element or skipped the caps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/gguf/ggml_quant.h"
#include "common/gguf/gguf_file.h"
#include "common/gguf/gguf_writer.h"

namespace baton {
namespace {

// A file with an f32 vector, a Q6_K matrix [256 x 2] and, last, a Q4_K
// matrix [512 x 3] whose data ends the file.
std::vector<uint8_t> kquant_file() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  const std::vector<float> norm(256, 1.0f);
  w.add_tensor_copy("norm.weight", GgmlType::kF32, {256}, norm.data());
  std::vector<float> x(512 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97) * 0.01f - 0.4f;
  std::vector<uint8_t> q6(ggml_row_bytes(GgmlType::kQ6_K, 256) * 2);
  quantize_row(GgmlType::kQ6_K, x.data(), q6.data(), 512);
  w.add_tensor_copy("b.weight", GgmlType::kQ6_K, {256, 2}, q6.data());
  std::vector<uint8_t> q4(ggml_row_bytes(GgmlType::kQ4_K, 512) * 3);
  quantize_row(GgmlType::kQ4_K, x.data(), q4.data(), 512 * 3);
  w.add_tensor_copy("c.weight", GgmlType::kQ4_K, {512, 3}, q4.data());
  auto bytes = w.write_to_bytes();
  EXPECT_TRUE(bytes.ok());
  return *bytes;
}

// Byte offset of tensor `name`'s info field `field` (0: first dim, ...,
// n_dims: type) in a file whose tensor names are unique strings.
size_t info_field_at(const std::vector<uint8_t>& bytes, const std::string& name, int field) {
  std::string needle(8, '\0');
  const uint64_t len = name.size();
  std::memcpy(needle.data(), &len, 8);
  needle += name;
  const auto it = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
  EXPECT_NE(it, bytes.end()) << name;
  const size_t n_dims_at = static_cast<size_t>(it - bytes.begin()) + needle.size();
  return n_dims_at + 4 + 8 * static_cast<size_t>(field);
}

std::string parse_error(std::vector<uint8_t> bytes) {
  auto file = GgufFile::FromBytes(std::move(bytes));
  return file.ok() ? "OK" : std::string(file.status().message());
}

TEST(KquantGguf, MixedKquantAndF32TensorsAreSizedByTheirBlocks) {
  auto file = GgufFile::FromBytes(kquant_file());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufTensorInfo* b = (*file)->find_tensor("b.weight");
  const GgufTensorInfo* c = (*file)->find_tensor("c.weight");
  ASSERT_TRUE(b != nullptr && c != nullptr);
  EXPECT_EQ(b->type, GgmlType::kQ6_K);
  EXPECT_EQ(b->n_bytes, 2u * 210);
  EXPECT_EQ(c->type, GgmlType::kQ4_K);
  EXPECT_EQ(c->n_bytes, 3u * 2 * 144);
  EXPECT_EQ((*file)->data_offset() + c->offset + c->n_bytes, (*file)->file_size());
}

TEST(KquantGguf, TruncatedKquantTensorIsRefused) {
  std::vector<uint8_t> bytes = kquant_file();
  bytes.pop_back();  // the last Q4_K super-block loses a byte
  EXPECT_NE(parse_error(bytes).find("tensor 'c.weight' data ["), std::string::npos) << parse_error(bytes);
  EXPECT_NE(parse_error(bytes).find("runs past the end of the file"), std::string::npos);
}

TEST(KquantGguf, RowThatIsNotWholeSuperBlocksIsRefusedByName) {
  std::vector<uint8_t> bytes = kquant_file();
  // c.weight [512 x 3] -> [128 x 12]: same element count, rows of half a block.
  const uint64_t ne0 = 128, ne1 = 12;
  std::memcpy(bytes.data() + info_field_at(bytes, "c.weight", 0), &ne0, 8);
  std::memcpy(bytes.data() + info_field_at(bytes, "c.weight", 1), &ne1, 8);
  EXPECT_NE(parse_error(bytes).find("tensor 'c.weight' has row length ne0=128, not a multiple of the q4_K "
                                    "block size 256"),
            std::string::npos)
      << parse_error(bytes);
}

TEST(KquantGguf, HostileKquantElementCountIsCappedByTheFileSize) {
  std::vector<uint8_t> bytes = kquant_file();
  const uint64_t ne1 = uint64_t{1} << 40;  // 2^49 elements: ~2^48 bytes of Q6_K
  std::memcpy(bytes.data() + info_field_at(bytes, "b.weight", 1), &ne1, 8);
  EXPECT_NE(parse_error(bytes).find("tensor 'b.weight' data ["), std::string::npos) << parse_error(bytes);
}

}  // namespace
}  // namespace baton
