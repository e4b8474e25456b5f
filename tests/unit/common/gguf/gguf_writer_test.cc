#include "common/gguf/gguf_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include "common/gguf/gguf_file.h"
#include "tests/support/test_models.h"
#include <vector>

#include "common/gguf/gguf_file.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

std::vector<std::pair<std::string, GgufValue>> every_metadata_type() {
  using T = GgufValueType;
  return {
      {"v.u8", GgufValue::u8(200)},
      {"v.i8", GgufValue::i8(-100)},
      {"v.u16", GgufValue::u16(60000)},
      {"v.i16", GgufValue::i16(-30000)},
      {"v.u32", GgufValue::u32(4000000000u)},
      {"v.i32", GgufValue::i32(-2000000000)},
      {"v.u64", GgufValue::u64(std::numeric_limits<uint64_t>::max())},
      {"v.i64", GgufValue::i64(std::numeric_limits<int64_t>::min())},
      {"v.f32", GgufValue::f32(3.25f)},
      {"v.f64", GgufValue::f64(-1e300)},
      {"v.bool", GgufValue::boolean(true)},
      {"v.string", GgufValue::string("héllo\nworld")},
      {"v.empty_string", GgufValue::string("")},
      {"a.u8", GgufValue::array(T::kUint8, {GgufValue::u8(1), GgufValue::u8(255)})},
      {"a.i8", GgufValue::array(T::kInt8, {GgufValue::i8(-1)})},
      {"a.u16", GgufValue::array(T::kUint16, {GgufValue::u16(7)})},
      {"a.i16", GgufValue::array(T::kInt16, {GgufValue::i16(-7)})},
      {"a.u32", GgufValue::array(T::kUint32, {GgufValue::u32(9)})},
      {"a.i32", GgufValue::i32_array({-1, 0, 1})},
      {"a.u64", GgufValue::array(T::kUint64, {GgufValue::u64(1ull << 40)})},
      {"a.i64", GgufValue::array(T::kInt64, {GgufValue::i64(-(1ll << 40))})},
      {"a.f32", GgufValue::f32_array({0.5f, -0.25f})},
      {"a.f64", GgufValue::array(T::kFloat64, {GgufValue::f64(2.5)})},
      {"a.bool", GgufValue::array(T::kBool, {GgufValue::boolean(false), GgufValue::boolean(true)})},
      {"a.string", GgufValue::string_array({"a", "", "ccc"})},
      {"a.empty", GgufValue::array(T::kInt32, {})},
      {"a.nested", GgufValue::array(T::kArray, {GgufValue::i32_array({1, 2}), GgufValue::i32_array({}),
                                                GgufValue::array(T::kArray, {GgufValue::string_array({"x"})})})},
  };
}

std::vector<uint8_t> random_bytes(uint64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

struct TensorCase {
  std::string name;
  GgmlType type;
  std::vector<int64_t> dims;
};

std::vector<TensorCase> every_tensor_type() {
  return {{"t.f32", GgmlType::kF32, {3}},  // 12 bytes: forces padding
          {"t.f16", GgmlType::kF16, {5, 3}},
          {"t.bf16", GgmlType::kBF16, {7, 1, 2}},
          {"t.q8_0", GgmlType::kQ8_0, {64, 3}},
          {"t.q4_0", GgmlType::kQ4_0, {32, 2, 2, 2}}};
}

class GgufWriterAlignment : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufWriterAlignment, RoundTripsEveryMetadataTypeAndTensorTypeByteForByte) {
  const uint32_t alignment = GetParam();
  GgufWriter writer(alignment);
  const auto metadata = every_metadata_type();
  for (const auto& [key, value] : metadata) writer.set(key, value);
  std::vector<std::vector<uint8_t>> payloads;
  const std::vector<TensorCase> cases = every_tensor_type();
  for (size_t i = 0; i < cases.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : cases[i].dims) n *= d;
    payloads.push_back(random_bytes(ggml_row_bytes(cases[i].type, n), static_cast<uint32_t>(i)));
    writer.add_tensor_copy(cases[i].name, cases[i].type, cases[i].dims, payloads.back().data());
  }
  absl::StatusOr<std::vector<uint8_t>> bytes = writer.write_to_bytes();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto file = GgufFile::FromBytes(*bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;

  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  // general.alignment is recorded (first, as uint32) only when it is not 32.
  size_t first = 0;
  if (alignment != 32) {
    ASSERT_EQ(f.metadata().front().first, "general.alignment");
    EXPECT_EQ(f.metadata().front().second, GgufValue::u32(alignment));
    first = 1;
  } else {
    EXPECT_EQ(f.find("general.alignment"), nullptr);
  }
  ASSERT_EQ(f.metadata().size(), metadata.size() + first);
  for (size_t i = 0; i < metadata.size(); ++i) {
    EXPECT_EQ(f.metadata()[first + i].first, metadata[i].first);
    EXPECT_TRUE(f.metadata()[first + i].second == metadata[i].second) << metadata[i].first;
  }
  EXPECT_EQ(*f.get_int("v.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_THAT(std::string(f.get_int("v.u64").status().message()), HasSubstr("exceeds the int64 limit"));
  EXPECT_EQ(*f.get_float("v.f32"), 3.25);
  EXPECT_EQ(*f.get_string("v.string"), "héllo\nworld");
  EXPECT_EQ(*f.get_string_array("a.string"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(*f.get_int_array("a.i32"), (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(f.find("a.nested")->type_description(), "array of array of int32");
  EXPECT_EQ(*f.find("a.nested")->array()[2].array()[0].array()[0].as_string(), "x");

  ASSERT_EQ(f.tensors().size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const GgufTensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, cases[i].name);
    EXPECT_EQ(t.type, cases[i].type);
    EXPECT_EQ(t.dims, cases[i].dims);
    EXPECT_EQ(t.offset % alignment, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % alignment, 0u);
    ASSERT_EQ(t.n_bytes, payloads[i].size());
    EXPECT_EQ(std::memcmp(t.data, payloads[i].data(), t.n_bytes), 0) << t.name;
  }
  // ggml packs tensors in order, each padded to the alignment.
  EXPECT_EQ(f.tensors()[1].offset, alignment);
  EXPECT_EQ(f.file_size() % alignment, 0u);
}

INSTANTIATE_TEST_SUITE_P(Gguf, GgufWriterAlignment, ::testing::Values(32u, 64u));

std::string temp_path(const std::string& stem) {
  return ::testing::TempDir() + "/" + stem + "_" + std::to_string(getpid()) + ".gguf";
}

TEST(GgufWriter, WriteToFileMatchesWriteToBytesAndOpensMapped) {
  GgufWriter writer;
  writer.set_string("general.architecture", "llama");
  writer.set_u32("llama.block_count", 2);
  const std::vector<uint8_t> payload = random_bytes(18 * 8, 9);
  int fill_calls = 0;
  writer.add_tensor("w", GgmlType::kQ4_0, {64, 4}, [&](uint8_t* dst, uint64_t n_bytes) {
    ++fill_calls;
    EXPECT_EQ(n_bytes, payload.size());
    std::memcpy(dst, payload.data(), n_bytes);
    return absl::OkStatus();
  });
  const std::string path = temp_path("writer_roundtrip");
  ASSERT_TRUE(writer.write(path).ok());
  auto bytes = writer.write_to_bytes();
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(fill_calls, 2);

  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->file_size(), bytes->size());
  const GgufTensorInfo* w = (*file)->find_tensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(std::memcmp(w->data, payload.data(), payload.size()), 0);
  EXPECT_EQ(*(*file)->get_int("llama.block_count"), 2);
  EXPECT_EQ(std::memcmp(w->data - (*file)->data_offset() - w->offset, bytes->data(), bytes->size()), 0);
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0);  // renamed away
  std::remove(path.c_str());
}

TEST(GgufWriter, SetReplacesAnExistingKeyInPlace) {
  GgufWriter writer;
  writer.set_u32("a", 1);
  writer.set_u32("b", 2);
  writer.set_string("a", "replaced");
  auto file = GgufFile::FromBytes(*writer.write_to_bytes());
  ASSERT_TRUE(file.ok());
  ASSERT_EQ((*file)->metadata().size(), 2u);
  EXPECT_EQ((*file)->metadata()[0].first, "a");
  EXPECT_EQ(*(*file)->get_string("a"), "replaced");
}

TEST(GgufWriter, InvalidTensorsAreReportedByWrite) {
  {
    GgufWriter writer;
    float data[64] = {};
    writer.add_tensor_copy("x", GgmlType::kF32, {4}, data);
    writer.add_tensor_copy("x", GgmlType::kF32, {4}, data);
    EXPECT_THAT(std::string(writer.write_to_bytes().status().message()), HasSubstr("tensor name 'x' is added twice"));
  }
  {
    GgufWriter writer;
    writer.add_tensor("q", GgmlType::kQ8_0, {48}, [](uint8_t*, uint64_t) { return absl::OkStatus(); });
    EXPECT_THAT(std::string(writer.write_to_bytes().status().message()),
                HasSubstr("row length 48, not a multiple of the q8_0 block size 32"));
  }
  {
    GgufWriter writer;
    writer.add_tensor("t", GgmlType::kF32, {1, 1, 1, 1, 1}, [](uint8_t*, uint64_t) { return absl::OkStatus(); });
    EXPECT_THAT(std::string(writer.write_to_bytes().status().message()), HasSubstr("5 dimensions"));
  }
}

TEST(GgufWriter, FillErrorsPropagateAndLeaveNoFileBehind) {
  GgufWriter writer;
  writer.add_tensor("t", GgmlType::kF32, {4},
                    [](uint8_t*, uint64_t) { return absl::DataLossError("source tensor unreadable"); });
  const std::string path = temp_path("writer_fill_error");
  absl::Status status = writer.write(path);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0);
}

TEST(GgufWriter, UnwritablePathErrorNamesThePath) {
  GgufWriter writer;
  absl::Status status = writer.write("/nonexistent/baton/out.gguf");
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("/nonexistent/baton/out.gguf.tmp"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("No such file or directory"));
}

TEST(GgufWriter, ConflictingAlignmentMetadataIsAnError) {
  GgufWriter writer(64);
  writer.set_u32("general.alignment", 32);
  EXPECT_THAT(std::string(writer.write_to_bytes().status().message()), HasSubstr("aligns to uint32 64"));
}

TEST(GgufWriter, FileWithNoTensorsIsReadable) {
  GgufWriter writer;
  writer.set_bool("flag", true);
  auto file = GgufFile::FromBytes(*writer.write_to_bytes());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(*(*file)->get_bool("flag"));
  EXPECT_TRUE((*file)->tensors().empty());
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

// llama.cpp's gguf loader (gguf_init_from_file_impl) refuses a file unless the
// data section starts at the first aligned offset after the tensor infos and
// each tensor's offset equals the sum of the aligned sizes of the tensors
// before it, in info order. Check a synthesized model against those rules.
TEST(GgufWriter, LayoutFollowsTheRulesLlamaCppLoaderEnforces) {
  const std::string& path = testing::synth_model_path("tiny-qwen2", GgmlType::kQ4_0);
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const uint64_t alignment = (*file)->alignment();
  EXPECT_EQ((*file)->data_offset() % alignment, 0u);
  uint64_t expected_offset = 0;
  for (const GgufTensorInfo& t : (*file)->tensors()) {
    EXPECT_EQ(t.offset, expected_offset) << t.name;
    expected_offset += (t.n_bytes + alignment - 1) / alignment * alignment;
  }
  EXPECT_LE((*file)->data_offset() + expected_offset - alignment, (*file)->file_size());
  // llama.cpp reads general.architecture and the file type from these keys.
  EXPECT_EQ(*(*file)->get_string("general.architecture"), "qwen2");
  EXPECT_EQ(*(*file)->get_int("general.file_type"), 2);  // LLAMA_FTYPE_MOSTLY_Q4_0
}

}  // namespace
}  // namespace baton
