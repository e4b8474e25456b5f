// PreTokenizer split rules against splits derived by hand from the regexes
// (see pre_tokenizer.h). Each case lists the expected words for gpt2,
// llama-bpe and qwen2; the comments explain the non-obvious ones.
#include "common/tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/tokenizer/unicode.h"
#include "tests/unit/tokenizer_test_util.h"

namespace baton {
namespace {

using Words = std::vector<std::string>;

Words Split(PreTokenizerKind kind, const std::string& text) {
  Words words;
  for (const std::string_view word : PreTokenizer(kind).split(text)) words.emplace_back(word);
  return words;
}

struct SplitCase {
  std::string text;
  Words gpt2;
  Words llama3;
  Words qwen2;
};

class PreTokenizerSplit : public ::testing::TestWithParam<SplitCase> {};

TEST_P(PreTokenizerSplit, MatchesTheRegexSplit) {
  const SplitCase& c = GetParam();
  EXPECT_EQ(Split(PreTokenizerKind::kGpt2, c.text), c.gpt2) << "gpt2: " << c.text;
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, c.text), c.llama3) << "llama-bpe: " << c.text;
  EXPECT_EQ(Split(PreTokenizerKind::kQwen2, c.text), c.qwen2) << "qwen2: " << c.text;
}

const SplitCase kSplitCases[] = {
    {"Hello world", {"Hello", " world"}, {"Hello", " world"}, {"Hello", " world"}},
    {"Hello, world!",
     {"Hello", ",", " world", "!"},
     {"Hello", ",", " world", "!"},
     {"Hello", ",", " world", "!"}},
    // Digits: one run (gpt2), groups of three from the left (llama-bpe), single (qwen2).
    {"1234567", {"1234567"}, {"123", "456", "7"}, {"1", "2", "3", "4", "5", "6", "7"}},
    {"333", {"333"}, {"333"}, {"3", "3", "3"}},
    // gpt2 joins the space to the number; llama-bpe/qwen2 have no " ?" before \p{N}.
    {" 12345", {" 12345"}, {" ", "123", "45"}, {" ", "1", "2", "3", "4", "5"}},
    {"3.14", {"3", ".", "14"}, {"3", ".", "14"}, {"3", ".", "1", "4"}},
    {"abc123def", {"abc", "123", "def"}, {"abc", "123", "def"}, {"abc", "1", "2", "3", "def"}},
    // U+00BD ½ is \p{N} (No); Arabic-Indic digits are Nd; U+216B Ⅻ is Nl.
    {"4 \xC2\xBD months",
     {"4", " \xC2\xBD", " months"},
     {"4", " ", "\xC2\xBD", " months"},
     {"4", " ", "\xC2\xBD", " months"}},
    {"\xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4",
     {"\xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4"},
     {"\xD9\xA1\xD9\xA2\xD9\xA3", "\xD9\xA4"},
     {"\xD9\xA1", "\xD9\xA2", "\xD9\xA3", "\xD9\xA4"}},
    {"\xE2\x85\xAB", {"\xE2\x85\xAB"}, {"\xE2\x85\xAB"}, {"\xE2\x85\xAB"}},
    // Contractions: case-sensitive in gpt2, case-insensitive in llama-bpe/qwen2.
    {"he's", {"he", "'s"}, {"he", "'s"}, {"he", "'s"}},
    {"HE'S", {"HE", "'", "S"}, {"HE", "'S"}, {"HE", "'S"}},
    {"YOU'LL", {"YOU", "'", "LL"}, {"YOU", "'LL"}, {"YOU", "'LL"}},
    {"We'Ve a'lL I'd",
     {"We", "'", "Ve", " a", "'", "lL", " I", "'d"},
     {"We", "'Ve", " a", "'lL", " I", "'d"},
     {"We", "'Ve", " a", "'lL", " I", "'d"}},
    {"'sup", {"'s", "up"}, {"'s", "up"}, {"'s", "up"}},
    // " '" is taken by " ?[^\s\p{L}\p{N}]+" before a contraction can start.
    {"sure, 'RE you",
     {"sure", ",", " '", "RE", " you"},
     {"sure", ",", " '", "RE", " you"},
     {"sure", ",", " '", "RE", " you"}},
    // llama-bpe/qwen2: one non-letter, non-newline char may lead a letter run.
    {"(normal)", {"(", "normal", ")"}, {"(normal", ")"}, {"(normal", ")"}},
    {"$hello", {"$", "hello"}, {"$hello"}, {"$hello"}},
    {"\tx", {"\t", "x"}, {"\tx"}, {"\tx"}},
    // Whitespace runs: \s+(?!\S) leaves the last space to the next word.
    {"a  b", {"a", " ", " b"}, {"a", " ", " b"}, {"a", " ", " b"}},
    {"a   ", {"a", "   "}, {"a", "   "}, {"a", "   "}},
    {"   ", {"   "}, {"   "}, {"   "}},
    {"  !!!", {" ", " !!!"}, {" ", " !!!"}, {" ", " !!!"}},
    // Newlines: llama-bpe/qwen2 end a whitespace run after its last \r or \n.
    {"\n\nHello", {"\n", "\n", "Hello"}, {"\n\n", "Hello"}, {"\n\n", "Hello"}},
    {"a   \n\n  b",
     {"a", "   \n\n ", " b"},
     {"a", "   \n\n", " ", " b"},
     {"a", "   \n\n", " ", " b"}},
    {"hello\r\nworld",
     {"hello", "\r", "\n", "world"},
     {"hello", "\r\n", "world"},
     {"hello", "\r\n", "world"}},
    {"end!!!\n\nnext",
     {"end", "!!!", "\n", "\n", "next"},
     {"end", "!!!\n\n", "next"},
     {"end", "!!!\n\n", "next"}},
    {" \n \n", {" \n \n"}, {" \n \n"}, {" \n \n"}},
    // CJK ideographs are letters (Lo); U+FF5E ～ is a symbol (Sm).
    {"\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8"
     "apple\xE5\xB7\xA5\xE4\xBD\x9C"
     "1314151\xE5\xA4\xA9\xEF\xBD\x9E",
     {"\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8"
      "apple\xE5\xB7\xA5\xE4\xBD\x9C",
      "1314151", "\xE5\xA4\xA9", "\xEF\xBD\x9E"},
     {"\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8"
      "apple\xE5\xB7\xA5\xE4\xBD\x9C",
      "131", "415", "1", "\xE5\xA4\xA9", "\xEF\xBD\x9E"},
     {"\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8"
      "apple\xE5\xB7\xA5\xE4\xBD\x9C",
      "1", "3", "1", "4", "1", "5", "1", "\xE5\xA4\xA9", "\xEF\xBD\x9E"}},
    // Emoji are symbols (So); ZWJ (Cf) and VS16 (Mn) are neither L, N nor \s.
    {"\xF0\x9F\x9A\x80 (normal)",
     {"\xF0\x9F\x9A\x80", " (", "normal", ")"},
     {"\xF0\x9F\x9A\x80", " (", "normal", ")"},
     {"\xF0\x9F\x9A\x80", " (", "normal", ")"}},
    {"\xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F!",
     {"\xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F!"},
     {"\xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F!"},
     {"\xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F!"}},
    {"\xF0\x9F\xA6\x99"
     "a",
     {"\xF0\x9F\xA6\x99", "a"},
     {"\xF0\x9F\xA6\x99"
      "a"},
     {"\xF0\x9F\xA6\x99"
      "a"}},
    // Accented letters: precomposed ử/ệ are letters; a combining acute (Mn) is not.
    {"C\xE1\xBB\xAD"
     "a Vi\xE1\xBB\x87t",
     {"C\xE1\xBB\xAD"
      "a",
      " Vi\xE1\xBB\x87t"},
     {"C\xE1\xBB\xAD"
      "a",
      " Vi\xE1\xBB\x87t"},
     {"C\xE1\xBB\xAD"
      "a",
      " Vi\xE1\xBB\x87t"}},
    {"e\xCC\x81t", {"e", "\xCC\x81", "t"}, {"e", "\xCC\x81t"}, {"e", "\xCC\x81t"}},
    // Punctuation runs stay together.
    {"''''''```````\"\"\"\"......!!!!!!??????",
     {"''''''```````\"\"\"\"......!!!!!!??????"},
     {"''''''```````\"\"\"\"......!!!!!!??????"},
     {"''''''```````\"\"\"\"......!!!!!!??????"}},
    {"--- ===", {"---", " ==="}, {"---", " ==="}, {"---", " ==="}},
    // Unicode whitespace: NBSP and U+3000 are \s.
    {"a\xC2\xA0"
     "b",
     {"a", "\xC2\xA0", "b"},
     {"a",
      "\xC2\xA0"
      "b"},
     {"a",
      "\xC2\xA0"
      "b"}},
    {"x\xE3\x80\x80\xE3\x80\x80y",
     {"x", "\xE3\x80\x80", "\xE3\x80\x80", "y"},
     {"x", "\xE3\x80\x80", "\xE3\x80\x80y"},
     {"x", "\xE3\x80\x80", "\xE3\x80\x80y"}},
    {"", {}, {}, {}},
};

INSTANTIATE_TEST_SUITE_P(HandDerived, PreTokenizerSplit, ::testing::ValuesIn(kSplitCases));

TEST(PreTokenizer, InvalidUtf8BytesAreKeptAndClassedAsSymbols) {
  const std::string text = "ab\xFF\xC3 cd";  // 0xFF never valid; 0xC3 truncated by ' '
  EXPECT_EQ(Split(PreTokenizerKind::kGpt2, text), (Words{"ab", "\xFF\xC3", " cd"}));
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, text), (Words{"ab", "\xFF\xC3", " cd"}));
}

std::string FromHex(const std::string& hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return bytes;
}

const PreTokenizerKind kAllKinds[] = {
    PreTokenizerKind::kGpt2,          PreTokenizerKind::kLlama3,
    PreTokenizerKind::kQwen2,         PreTokenizerKind::kDeepseekLlm,
    PreTokenizerKind::kDeepseekCoder, PreTokenizerKind::kFalcon,
    PreTokenizerKind::kStarcoder,     PreTokenizerKind::kTekken,
};

// tests/data/vocab/pre_tokenizer_regex_cases.txt holds random strings split
// by the regexes themselves (Python `regex` module, sequences applied piece
// by piece as llama.cpp does; see gen_pre_tokenizer_cases.py), a second
// engine for the hand-written matchers: at least 800 per kind, every kind.
TEST(PreTokenizer, MatchesAnIndependentRegexEngineOnRandomText) {
  std::ifstream in(testing_tokenizer::VocabPath("pre_tokenizer_regex_cases.txt"));
  ASSERT_TRUE(in.good()) << "missing pre_tokenizer_regex_cases.txt";
  std::map<std::string, size_t> n_cases;  // by kind name
  size_t n_failed = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const std::vector<std::string> fields = absl::StrSplit(line, '\t');
    ASSERT_EQ(fields.size(), 3u) << line;
    auto kind = PreTokenizer::FromName(fields[0]);
    ASSERT_TRUE(kind.ok()) << kind.status();
    ASSERT_EQ(kind->name(), fields[0]) << "the file names kinds by their canonical name";
    const std::string text = FromHex(fields[1]);
    Words expected;
    for (const absl::string_view hex_word : absl::StrSplit(fields[2], ',')) {
      expected.push_back(FromHex(std::string(hex_word)));
    }
    const Words words = Split(kind->kind(), text);
    ++n_cases[fields[0]];
    if (words != expected) {
      ++n_failed;
      ADD_FAILURE() << fields[0] << " on hex " << fields[1] << ": got " << words.size()
                    << " words, the regex " << expected.size();
    }
  }
  for (const PreTokenizerKind kind : kAllKinds) {
    const std::string name(PreTokenizer(kind).name());
    EXPECT_GE(n_cases[name], 800u) << name;
  }
  EXPECT_EQ(n_failed, 0u);
}

TEST(PreTokenizer, WordsAreNonEmptyAndConcatenateToTheInput) {
  std::mt19937 rng(1234);
  const char32_t alphabet[] = {'a', 'Z', '1', ' ', ' ', '\n', '\r', '\t', '\'', 's', 'L', '.',
                               '/', '$', 0xA0, 0xBD, 0xC9, 0x301, 0x4E2D, 0x3000, 0x3002,
                               0x1F600, 0x200D, 0xFF5E, 0xFF21, 0x212A};
  for (int iteration = 0; iteration < 2000; ++iteration) {
    std::string text;
    const int length = static_cast<int>(rng() % 24);
    for (int i = 0; i < length; ++i) {
      if (rng() % 16 == 0) {
        text.push_back(static_cast<char>(0x80 + rng() % 128));  // stray invalid byte
      } else {
        AppendUtf8(alphabet[rng() % std::size(alphabet)], text);
      }
    }
    for (const PreTokenizerKind kind : kAllKinds) {
      std::string joined;
      for (const std::string& word : Split(kind, text)) {
        EXPECT_FALSE(word.empty());
        joined += word;
      }
      ASSERT_EQ(joined, text) << PreTokenizer(kind).name();
    }
  }
}

TEST(PreTokenizer, NamesMapToKinds) {
  const std::pair<const char*, PreTokenizerKind> names[] = {
      {"", PreTokenizerKind::kGpt2},
      {"gpt-2", PreTokenizerKind::kGpt2},
      {"gpt2", PreTokenizerKind::kGpt2},
      {"llama-bpe", PreTokenizerKind::kLlama3},
      {"llama3", PreTokenizerKind::kLlama3},
      {"llama-v3", PreTokenizerKind::kLlama3},
      {"qwen2", PreTokenizerKind::kQwen2},
      {"deepseek-r1-qwen", PreTokenizerKind::kQwen2},
      {"deepseek-llm", PreTokenizerKind::kDeepseekLlm},
      {"deepseek-coder", PreTokenizerKind::kDeepseekCoder},
      {"falcon", PreTokenizerKind::kFalcon},
      {"starcoder", PreTokenizerKind::kStarcoder},
      {"refact", PreTokenizerKind::kStarcoder},
      {"smollm", PreTokenizerKind::kStarcoder},
      {"command-r", PreTokenizerKind::kStarcoder},
      {"tekken", PreTokenizerKind::kTekken},
  };
  for (const auto& [name, kind] : names) {
    const auto result = PreTokenizer::FromName(name);
    ASSERT_TRUE(result.ok()) << name << ": " << result.status();
    EXPECT_EQ(result->kind(), kind) << name;
  }
  // Every canonical name maps back to its kind.
  for (const PreTokenizerKind kind : kAllKinds) {
    EXPECT_EQ(PreTokenizer::FromName(PreTokenizer(kind).name()).value().kind(), kind);
  }
  EXPECT_TRUE(PreTokenizer::FromName("llama-bpe").value().ignores_merges());
  EXPECT_TRUE(PreTokenizer::FromName("tekken").value().ignores_merges());
  EXPECT_FALSE(PreTokenizer::FromName("qwen2").value().ignores_merges());
  EXPECT_FALSE(PreTokenizer::FromName("deepseek-llm").value().ignores_merges());
}

// Names llama.cpp knows that Baton does not implement (and near misses) are
// refused, and the message lists every supported name.
TEST(PreTokenizer, UnknownNameIsAnErrorNamingValueAndSupported) {
  for (const char* unknown : {"gpt-4o", "deepseek-v3", "chameleon", "Falcon", "qwen2 "}) {
    const auto result = PreTokenizer::FromName(unknown);
    ASSERT_FALSE(result.ok()) << unknown;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(result.status().message());
    EXPECT_NE(message.find(absl::StrCat("'", unknown, "'")), std::string::npos) << message;
    for (const char* supported :
         {"gpt2", "llama-bpe", "qwen2", "deepseek-r1-qwen", "deepseek-llm", "deepseek-coder",
          "falcon", "starcoder", "refact", "smollm", "command-r", "tekken"}) {
      EXPECT_NE(message.find(supported), std::string::npos) << supported << " in " << message;
    }
  }
}

TEST(Utf8, DecodeIsStrict) {
  auto decode = [](std::string_view s) { return DecodeUtf8(s, 0); };
  EXPECT_TRUE(decode("\xF0\x9F\x98\x80").valid);
  EXPECT_EQ(decode("\xF0\x9F\x98\x80").code_point, 0x1F600u);
  EXPECT_FALSE(decode("\xC0\x80").valid);          // overlong
  EXPECT_FALSE(decode("\xE0\x80\x80").valid);      // overlong
  EXPECT_FALSE(decode("\xED\xA0\x80").valid);      // surrogate
  EXPECT_FALSE(decode("\xF4\x90\x80\x80").valid);  // above U+10FFFF
  EXPECT_EQ(decode("\xE2\x82" "x").n_bytes, 2u);   // maximal subpart
  EXPECT_TRUE(IsIncompleteUtf8Prefix("\xE2\x82", 0));
  EXPECT_FALSE(IsIncompleteUtf8Prefix("\xE2\x82x", 0));
  EXPECT_FALSE(IsIncompleteUtf8Prefix("\x80", 0));
  std::string all;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    all.clear();
    AppendUtf8(cp, all);
    const Utf8Char c = DecodeUtf8(all, 0);
    ASSERT_TRUE(c.valid && c.code_point == cp && c.n_bytes == all.size())
        << static_cast<uint32_t>(cp);
  }
}

TEST(Utf8, Gpt2ByteMapIsABijection) {
  std::vector<bool> seen(0x144, false);
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = ByteToCodePoint(static_cast<uint8_t>(b));
    ASSERT_LT(cp, 0x144u);
    EXPECT_FALSE(seen[cp]);
    seen[cp] = true;
    EXPECT_EQ(CodePointToByte(cp), b);
  }
  EXPECT_EQ(ByteToCodePoint(' '), 0x120u);  // 'Ġ'
  EXPECT_EQ(ByteToCodePoint('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(ByteToCodePoint('A'), static_cast<char32_t>('A'));
}

}  // namespace
}  // namespace baton
