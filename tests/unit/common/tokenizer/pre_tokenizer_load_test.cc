// Every supported tokenizer.ggml.pre value through the real loader
// (Tokenizer::FromGguf on a GGUF written here): the name selects the split
// rules (digits grouped or single, whole-word lookup for tekken), and the
// tokenizer reports the kind's canonical name.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/gguf/gguf_file.h"
#include "common/gguf/gguf_writer.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/unicode.h"

namespace baton {
namespace {

constexpr int32_t kTwelve = 256;  // "12", reachable by the merge "1 2"
constexpr int32_t kXy = 257;      // "xy", no merge: only a whole-word lookup finds it

// The 256 GPT-2 alphabet chars (id = byte), then "12" and "xy".
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadWithPre(const std::string& pre) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    std::string c;
    AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(b)), c);
    tokens.push_back(c);
  }
  tokens.insert(tokens.end(), {"12", "xy"});
  GgufWriter writer;
  writer.set_string("tokenizer.ggml.model", "gpt2");
  writer.set_string("tokenizer.ggml.pre", pre);
  writer.set_string_array("tokenizer.ggml.tokens", tokens);
  writer.set_i32_array("tokenizer.ggml.token_type", std::vector<int32_t>(tokens.size(), 1));
  writer.set_string_array("tokenizer.ggml.merges", {"1 2"});
  auto bytes = writer.write_to_bytes();
  if (!bytes.ok()) return bytes.status();
  auto file = GgufFile::FromBytes(std::move(*bytes));
  if (!file.ok()) return file.status();
  return Tokenizer::FromGguf(**file);
}

std::vector<int32_t> Bytes(const std::string& text) {
  return std::vector<int32_t>(text.begin(), text.end());
}

TEST(PreTokenizerLoad, EverySupportedNameLoadsAsItsKind) {
  const std::pair<const char*, const char*> names[] = {
      {"gpt2", "gpt2"},
      {"gpt-2", "gpt2"},
      {"llama-bpe", "llama-bpe"},
      {"llama3", "llama-bpe"},
      {"llama-v3", "llama-bpe"},
      {"qwen2", "qwen2"},
      {"deepseek-r1-qwen", "qwen2"},
      {"deepseek-llm", "deepseek-llm"},
      {"deepseek-coder", "deepseek-coder"},
      {"falcon", "falcon"},
      {"starcoder", "starcoder"},
      {"refact", "starcoder"},
      {"smollm", "starcoder"},
      {"command-r", "starcoder"},
      {"tekken", "tekken"},
  };
  for (const auto& [name, canonical] : names) {
    const auto tokenizer = LoadWithPre(name);
    ASSERT_TRUE(tokenizer.ok()) << name << ": " << tokenizer.status();
    EXPECT_EQ((*tokenizer)->pre_tokenizer_name(), canonical) << name;
  }
}

// "123": one word merged to "12" "3" where digits are grouped (gpt2, falcon's
// triples, llama-bpe's threes); single digits never meet the merge.
TEST(PreTokenizerLoad, DigitGroupingReachesTheMerges) {
  const std::pair<const char*, std::vector<int32_t>> cases[] = {
      {"gpt2", {kTwelve, '3'}},         {"falcon", {kTwelve, '3'}},
      {"llama-bpe", {kTwelve, '3'}},    {"deepseek-llm", {kTwelve, '3'}},
      {"qwen2", Bytes("123")},          {"deepseek-r1-qwen", Bytes("123")},
      {"deepseek-coder", Bytes("123")}, {"command-r", Bytes("123")},
      {"tekken", Bytes("123")},
  };
  for (const auto& [name, ids] : cases) {
    const auto tokenizer = LoadWithPre(name);
    ASSERT_TRUE(tokenizer.ok()) << name << ": " << tokenizer.status();
    EXPECT_EQ((*tokenizer)->encode("123"), ids) << name;
  }
}

// tekken, like llama-bpe, takes a word that is itself a token whole
// (llama.cpp's ignore_merges); the others only merge.
TEST(PreTokenizerLoad, TekkenLooksWholeWordsUp) {
  for (const char* name : {"tekken", "llama-bpe"}) {
    const auto tokenizer = LoadWithPre(name);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    EXPECT_EQ((*tokenizer)->encode("xy"), (std::vector<int32_t>{kXy})) << name;
  }
  for (const char* name : {"gpt2", "qwen2", "starcoder", "deepseek-llm"}) {
    const auto tokenizer = LoadWithPre(name);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    EXPECT_EQ((*tokenizer)->encode("xy"), Bytes("xy")) << name;
  }
}

}  // namespace
}  // namespace baton
