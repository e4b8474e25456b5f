#include "common/gguf/gguf_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/gguf/gguf_writer.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

// Hand assembly of GGUF bytes, remembering where named fields sit so tests can
// corrupt exactly one of them.
class Builder {
 public:
  void mark(const std::string& name) { at_[name] = bytes_.size(); }
  void u8(uint8_t v) { bytes_.push_back(v); }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void f32(float v) { raw(&v, 4); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  void pad_to(size_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
  }
  void header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    raw("GGUF", 4);
    mark("version");
    u32(version);
    mark("n_tensors");
    u64(n_tensors);
    mark("n_kv");
    u64(n_kv);
  }
  size_t at(const std::string& name) const { return at_.at(name); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
  std::map<std::string, size_t> at_;
};

// A small valid file: 4 metadata entries, tensors "a" (f32 [8]) and "b"
// (q8_0 [32, 2]); b's data ends exactly at the end of the file.
Builder hand_built_file(uint32_t version = 3) {
  Builder b;
  b.header(version, 2, 4);
  b.mark("key0");
  b.str("general.architecture");
  b.mark("type0");
  b.u32(8);
  b.str("llama");
  b.str("test.key_a");
  b.u32(4);  // uint32
  b.u32(7);
  b.mark("key2");
  b.str("test.key_b");
  b.u32(1);  // int8
  b.u8(0xFF);
  b.str("tokenizer.ggml.scores");
  b.u32(9);  // array
  b.u32(6);  // of float32
  b.mark("array_count");
  b.u64(3);
  b.f32(0.5f);
  b.f32(-1.0f);
  b.f32(2.0f);

  b.str("a");
  b.u32(1);
  b.u64(8);
  b.u32(0);  // f32
  b.u64(0);
  b.mark("b_name");
  b.str("b");
  b.mark("b_n_dims");
  b.u32(2);
  b.mark("b_ne0");
  b.u64(32);
  b.mark("b_ne1");
  b.u64(2);
  b.mark("b_type");
  b.u32(8);  // q8_0
  b.mark("b_offset");
  b.u64(32);
  b.pad_to(32);
  b.mark("data");
  for (int i = 0; i < 8; ++i) b.f32(static_cast<float>(i));
  for (int i = 0; i < 68; ++i) b.u8(static_cast<uint8_t>(i * 7));
  return b;
}

void patch_u32(std::vector<uint8_t>& bytes, size_t at, uint32_t v) { std::memcpy(bytes.data() + at, &v, 4); }
void patch_u64(std::vector<uint8_t>& bytes, size_t at, uint64_t v) { std::memcpy(bytes.data() + at, &v, 8); }

std::string parse_error(std::vector<uint8_t> bytes) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(std::move(bytes));
  if (file.ok()) return "OK";
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(file.status().message());
}

void expect_hand_built_contents(const GgufFile& file) {
  EXPECT_EQ(file.alignment(), 32u);
  ASSERT_EQ(file.metadata().size(), 4u);
  EXPECT_EQ(file.metadata()[0].first, "general.architecture");
  EXPECT_EQ(*file.get_string("general.architecture"), "llama");
  EXPECT_EQ(*file.get_int("test.key_a"), 7);
  EXPECT_EQ(*file.get_int("test.key_b"), -1);
  EXPECT_EQ(*file.get_float_array("tokenizer.ggml.scores"), (std::vector<float>{0.5f, -1.0f, 2.0f}));
  ASSERT_EQ(file.tensors().size(), 2u);
  const GgufTensorInfo* b = file.find_tensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, GgmlType::kQ8_0);
  EXPECT_EQ(b->dims, (std::vector<int64_t>{32, 2}));
  EXPECT_EQ(b->n_elements(), 64);
  EXPECT_EQ(b->n_bytes, 68u);
  EXPECT_EQ(b->data, file.tensors()[0].data + 32);
  EXPECT_EQ(b->data[1], 7);
  float a[8];
  std::memcpy(a, file.find_tensor("a")->data, sizeof(a));
  EXPECT_EQ(a[7], 7.0f);
  EXPECT_EQ(file.file_size(), file.data_offset() + 100);
  EXPECT_EQ(file.find_tensor("c"), nullptr);
  EXPECT_EQ(file.find("absent"), nullptr);
}

TEST(GgufFile, ReadsHandBuiltVersion3File) {
  auto file = GgufFile::FromBytes(hand_built_file(3).bytes());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->version(), 3u);
  expect_hand_built_contents(**file);
}

TEST(GgufFile, ReadsHandBuiltVersion2File) {
  auto file = GgufFile::FromBytes(hand_built_file(2).bytes());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->version(), 2u);
  expect_hand_built_contents(**file);
}

TEST(GgufFile, TruncationAtEveryByteOffsetIsAnErrorNeverACrash) {
  const std::vector<uint8_t> full = hand_built_file().bytes();
  for (size_t len = 0; len < full.size(); ++len) {
    std::vector<uint8_t> prefix(full.begin(), full.begin() + len);
    EXPECT_NE(parse_error(std::move(prefix)), "OK") << "truncated to " << len << " bytes";
  }
}

TEST(GgufFile, GettersNameTheKeyAndTheTypeFound) {
  auto file = GgufFile::FromBytes(hand_built_file().bytes());
  ASSERT_TRUE(file.ok());
  absl::StatusOr<int64_t> missing = (*file)->get_int("llama.block_count");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "metadata key 'llama.block_count' is missing");
  EXPECT_EQ((*file)->get_int("general.architecture").status().message(),
            "metadata key 'general.architecture' has type string, expected an integer");
  EXPECT_THAT(std::string((*file)->get_string_array("tokenizer.ggml.scores").status().message()),
              HasSubstr("has type array of float32, expected array of string"));
  EXPECT_THAT(std::string((*file)->get_bool("test.key_a").status().message()), HasSubstr("type uint32"));
  EXPECT_EQ(*(*file)->get_float("test.key_a"), 7.0);
}

TEST(GgufFile, BadMagicIsNamed) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  bytes[0] = 'X';
  EXPECT_THAT(parse_error(bytes), HasSubstr("bad magic"));
}

TEST(GgufFile, Version1IsRejectedByName) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  patch_u32(bytes, hand_built_file().at("version"), 1);
  EXPECT_THAT(parse_error(bytes), HasSubstr("GGUF version 1 is not supported"));
}

TEST(GgufFile, UnknownVersionAndBigEndianAreRejected) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  patch_u32(bytes, 4, 4);
  EXPECT_THAT(parse_error(bytes), HasSubstr("GGUF version 4"));
  patch_u32(bytes, 4, 0x03000000);
  EXPECT_THAT(parse_error(bytes), HasSubstr("big-endian"));
}

TEST(GgufFile, AbsurdTensorCountIsRejectedBeforeAllocating) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  patch_u64(bytes, hand_built_file().at("n_tensors"), uint64_t{1} << 60);
  EXPECT_THAT(parse_error(bytes), HasSubstr("tensor count 1152921504606846976 at byte offset 8 cannot fit"));
}

TEST(GgufFile, AbsurdMetadataCountIsRejected) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  patch_u64(bytes, hand_built_file().at("n_kv"), ~uint64_t{0});
  EXPECT_THAT(parse_error(bytes), HasSubstr("metadata count"));
}

TEST(GgufFile, AbsurdStringLengthIsRejected) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  patch_u64(bytes, hand_built_file().at("key0"), uint64_t{1} << 40);
  EXPECT_THAT(parse_error(bytes), HasSubstr("has length 1099511627776, past the end of the file"));
}

TEST(GgufFile, AbsurdArrayCountIsRejected) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  patch_u64(bytes, hand_built_file().at("array_count"), uint64_t{1} << 62);
  EXPECT_THAT(parse_error(bytes), HasSubstr("array count 4611686018427387904"));
}

TEST(GgufFile, UnknownValueTypeIsNamed) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  const size_t at = hand_built_file().at("type0");
  patch_u32(bytes, at, 99);
  EXPECT_THAT(parse_error(bytes), HasSubstr("metadata key 'general.architecture' has unknown value type 99 at byte "
                                            "offset " + std::to_string(at)));
}

TEST(GgufFile, UnsupportedTensorTypeIsNamed) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  patch_u32(bytes, hand_built_file().at("b_type"), 10);
  EXPECT_THAT(parse_error(bytes), HasSubstr("tensor 'b' has type q2_K (10)"));
  EXPECT_THAT(parse_error(bytes), HasSubstr("which Baton does not support; supported: f32, f16, bf16, q8_0, q4_0, "
                                            "q4_1, q5_0, q5_1, q4_K, q5_K, q6_K"));
}

TEST(GgufFile, Q8_KTensorIsRefusedAsActivationOnly) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  patch_u32(bytes, hand_built_file().at("b_type"), 15);
  EXPECT_THAT(parse_error(bytes), HasSubstr("tensor 'b' has type q8_K (15)"));
  EXPECT_THAT(parse_error(bytes), HasSubstr("an activation-only type that no model file stores"));
}

TEST(GgufFile, TensorDataPastTheEndIsRejected) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  patch_u64(bytes, hand_built_file().at("b_offset"), 64);
  EXPECT_THAT(parse_error(bytes), HasSubstr("tensor 'b' data [64, 132) runs past the end of the file"));
}

TEST(GgufFile, MisalignedTensorOffsetIsRejected) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  patch_u64(bytes, hand_built_file().at("b_offset"), 33);
  EXPECT_THAT(parse_error(bytes), HasSubstr("tensor 'b' data offset 33"));
  EXPECT_THAT(parse_error(bytes), HasSubstr("not a multiple of the alignment 32"));
}

TEST(GgufFile, OverlappingTensorsAreRejected) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  patch_u64(bytes, hand_built_file().at("b_offset"), 0);
  EXPECT_THAT(parse_error(bytes), HasSubstr("overlap"));
}

TEST(GgufFile, DuplicateTensorNamesAreRejected) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  bytes[hand_built_file().at("b_name") + 8] = 'a';
  EXPECT_THAT(parse_error(bytes), HasSubstr("tensor name 'a'"));
  EXPECT_THAT(parse_error(bytes), HasSubstr("is a duplicate"));
}

TEST(GgufFile, DuplicateMetadataKeysAreRejected) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  bytes[hand_built_file().at("key2") + 8 + 9] = 'a';  // "test.key_b" -> "test.key_a"
  EXPECT_THAT(parse_error(bytes), HasSubstr("metadata key 'test.key_a'"));
  EXPECT_THAT(parse_error(bytes), HasSubstr("is a duplicate"));
}

TEST(GgufFile, RowLengthNotAMultipleOfTheBlockIsRejected) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  patch_u64(bytes, hand_built_file().at("b_ne0"), 33);
  EXPECT_THAT(parse_error(bytes), HasSubstr("ne0=33, not a multiple of the q8_0 block size 32"));
}

TEST(GgufFile, ElementCountOverflowIsRejected) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  patch_u64(bytes, hand_built_file().at("b_ne0"), uint64_t{1} << 40);
  patch_u64(bytes, hand_built_file().at("b_ne1"), uint64_t{1} << 40);
  EXPECT_THAT(parse_error(bytes), HasSubstr("overflow"));
  patch_u64(bytes, hand_built_file().at("b_ne1"), ~uint64_t{0});  // negative as int64
  EXPECT_THAT(parse_error(bytes), HasSubstr("overflow"));
}

TEST(GgufFile, TooManyDimensionsAreRejected) {
  std::vector<uint8_t> bytes = hand_built_file().bytes();
  patch_u32(bytes, hand_built_file().at("b_n_dims"), 5);
  EXPECT_THAT(parse_error(bytes), HasSubstr("tensor 'b' has 5 dimensions"));
}

TEST(GgufFile, ArraysNestedDeeperThan8AreRejected) {
  auto nested = [](int depth) {
    Builder b;
    b.header(3, 0, 1);
    b.str("deep");
    b.u32(9);
    for (int d = 1; d < depth; ++d) {
      b.u32(9);  // array of arrays
      b.u64(1);
    }
    b.u32(4);  // innermost: array of uint32
    b.u64(1);
    b.u32(42);
    return b.bytes();
  };
  auto ok = GgufFile::FromBytes(nested(8));
  ASSERT_TRUE(ok.ok()) << ok.status();
  const GgufValue* v = (*ok)->find("deep");
  for (int d = 1; d < 8; ++d) v = &v->array().at(0);
  EXPECT_EQ(*v->array().at(0).as_int(), 42);
  EXPECT_THAT(parse_error(nested(9)), HasSubstr("nests arrays 9 deep"));
}

TEST(GgufFile, AlignmentMustBeAPowerOfTwo) {
  Builder b;
  b.header(3, 0, 1);
  b.str("general.alignment");
  b.u32(4);
  b.u32(48);
  EXPECT_THAT(parse_error(b.bytes()), HasSubstr("must be a power of two"));
}

TEST(GgufFile, OpenMissingFileIsNotFound) {
  auto file = GgufFile::Open("/nonexistent/baton/model.gguf");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("/nonexistent/baton/model.gguf"));
}

TEST(GgufFile, RandomByteFlipsNeverCrash) {
  // A writer-made file with every kind of section, then seeded corruption.
  GgufWriter writer;
  writer.set_string("general.architecture", "llama");
  writer.set_string_array("tokenizer.ggml.tokens", {"<s>", "</s>", "hello", "world"});
  writer.set_f32_array("tokenizer.ggml.scores", {0.0f, 0.0f, -1.0f, -2.0f});
  writer.set("nested", GgufValue::array(GgufValueType::kArray, {GgufValue::i32_array({1, 2}),
                                                                 GgufValue::i32_array({3})}));
  std::vector<uint8_t> data(256, 0x5A);
  writer.add_tensor_copy("t.f32", GgmlType::kF32, {8, 2}, data.data());
  writer.add_tensor_copy("t.q4", GgmlType::kQ4_0, {64}, data.data());
  writer.add_tensor_copy("t.q8", GgmlType::kQ8_0, {32}, data.data());
  absl::StatusOr<std::vector<uint8_t>> valid = writer.write_to_bytes();
  ASSERT_TRUE(valid.ok());
  std::mt19937 rng(1234);
  int parsed_ok = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> bytes = *valid;
    const int n_flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < n_flips; ++f) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    if (iter % 8 == 0) bytes.resize(rng() % bytes.size());
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(std::move(bytes));
    if (!file.ok()) continue;
    ++parsed_ok;
    uint64_t checksum = 0;  // touch every tensor byte so sanitizers see any bad view
    for (const GgufTensorInfo& t : (*file)->tensors()) {
      for (uint64_t i = 0; i < t.n_bytes; ++i) checksum += t.data[i];
    }
    EXPECT_GE(checksum, 0u);
  }
  EXPECT_GT(parsed_ok, 0);  // flips inside tensor data leave the file valid
}

}  // namespace
}  // namespace baton
