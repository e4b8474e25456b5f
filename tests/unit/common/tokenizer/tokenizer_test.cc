// Tokenizer against the llama.cpp vocab test vectors (every case must match
// exactly), special-token handling, decode conventions, round trips on
// generated text, and load errors on small synthetic vocabularies.
#include "common/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "common/gguf/gguf_file.h"
#include "common/gguf/gguf_writer.h"
#include "common/tokenizer/spm_tokenizer.h"
#include "common/tokenizer/unicode.h"
#include "common/tokenizer/vocab.h"
#include "common/util/check.h"
#include "tests/unit/tokenizer_test_util.h"

namespace baton {
namespace {

using testing_tokenizer::MixedText;
using testing_tokenizer::VocabPath;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> expected;
};

// NAME.gguf.inp / .out as described in tests/data/vocab/README.md.
std::vector<VocabCase> LoadVocabCases(const std::string& gguf_name) {
  const std::string inputs = ReadFile(VocabPath(gguf_name + ".inp"));
  const std::string outputs = ReadFile(VocabPath(gguf_name + ".out"));
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t begin = 0; begin < inputs.size();) {
    size_t end = inputs.find(separator, begin);
    if (end == std::string::npos) end = inputs.size();
    texts.push_back(inputs.substr(begin, end - begin));
    begin = end == inputs.size() ? end : end + separator.size();
  }
  std::vector<VocabCase> cases;
  std::istringstream lines(outputs);
  std::string line;
  for (const std::string& text : texts) {
    if (!std::getline(lines, line)) break;
    VocabCase c{text, {}};
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.expected.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), texts.size()) << gguf_name << ": .out has fewer lines than .inp cases";
  return cases;
}

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& gguf_name) {
  auto file = GgufFile::Open(VocabPath(gguf_name));
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return nullptr;
  auto tokenizer = Tokenizer::FromGguf(**file);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

const Tokenizer& LlamaSpm() {
  static const std::unique_ptr<Tokenizer> tokenizer = LoadTokenizer("ggml-vocab-llama-spm.gguf");
  return *tokenizer;
}
const Tokenizer& Gpt2() {
  static const std::unique_ptr<Tokenizer> tokenizer = LoadTokenizer("ggml-vocab-gpt-2.gguf");
  return *tokenizer;
}

std::string Escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void ExpectAllVocabCasesPass(const Tokenizer& tokenizer, const std::string& gguf_name,
                             size_t min_cases) {
  const std::vector<VocabCase> cases = LoadVocabCases(gguf_name);
  ASSERT_GE(cases.size(), min_cases);
  size_t n_passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int32_t> ids = tokenizer.encode(cases[i].text, {.add_bos = false});
    EXPECT_EQ(ids, cases[i].expected) << gguf_name << " case " << i << ": '"
                                      << Escape(cases[i].text) << "'";
    n_passed += ids == cases[i].expected;
  }
  std::printf("%s: %zu / %zu vocab cases pass\n", gguf_name.c_str(), n_passed, cases.size());
}

TEST(TokenizerVocab, LlamaSpmMatchesEveryReferenceCase) {
  ExpectAllVocabCasesPass(LlamaSpm(), "ggml-vocab-llama-spm.gguf", 30);
}

TEST(TokenizerVocab, Gpt2MatchesEveryReferenceCase) {
  ExpectAllVocabCasesPass(Gpt2(), "ggml-vocab-gpt-2.gguf", 30);
}

TEST(Tokenizer, ReadsLlamaSpmMetadata) {
  const Tokenizer& t = LlamaSpm();
  EXPECT_EQ(t.model_name(), "llama");
  EXPECT_EQ(t.n_vocab(), 32000);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.eot_id(), -1);
  EXPECT_EQ(t.unk_id(), 0);
  EXPECT_TRUE(t.add_bos());
  EXPECT_FALSE(t.add_eos());
  EXPECT_TRUE(t.add_space_prefix());
  EXPECT_TRUE(t.is_eog(2));
  EXPECT_FALSE(t.is_eog(1));
  EXPECT_EQ(t.token_type(1), TokenType::kControl);
  EXPECT_EQ(t.token_text(1), "<s>");
  EXPECT_EQ(t.token_piece(13), "\n");  // <0x0A>
}

TEST(Tokenizer, ReadsGpt2Metadata) {
  const Tokenizer& t = Gpt2();
  EXPECT_EQ(t.model_name(), "gpt2");
  EXPECT_EQ(t.pre_tokenizer_name(), "gpt2");
  EXPECT_EQ(t.n_vocab(), 50257);
  EXPECT_EQ(t.bos_id(), 50256);
  EXPECT_EQ(t.eos_id(), 50256);
  EXPECT_FALSE(t.add_bos());
  EXPECT_FALSE(t.add_eos());
  EXPECT_FALSE(t.add_space_prefix());
  EXPECT_TRUE(t.is_eog(50256));
  EXPECT_EQ(t.token_piece(t.encode(" world")[0]), " world");
}

TEST(Tokenizer, AddsBosAndEosAsAsked) {
  const Tokenizer& t = LlamaSpm();
  const std::vector<int32_t> plain = t.encode("Hello world", {.add_bos = false});
  EXPECT_EQ(plain, (std::vector<int32_t>{15043, 3186}));
  EXPECT_EQ(t.encode("Hello world"), (std::vector<int32_t>{1, 15043, 3186}));  // file default
  EXPECT_EQ(t.encode("Hello world", {.add_bos = true, .add_eos = true}),
            (std::vector<int32_t>{1, 15043, 3186, 2}));
  EXPECT_EQ(t.encode("", {.add_bos = false}), std::vector<int32_t>{});
  EXPECT_EQ(t.encode(""), std::vector<int32_t>{1});
  EXPECT_EQ(Gpt2().encode("Hello world"), (std::vector<int32_t>{15496, 995}));  // no BOS
}

TEST(Tokenizer, SpecialTokenTextIsParsedOnlyWhenAsked) {
  const Tokenizer& llama = LlamaSpm();
  const std::string prompt = "<s>Hello</s> world";
  const std::vector<int32_t> parsed =
      llama.encode(prompt, {.add_bos = false, .parse_special = true});
  // A space prefix follows each special token, as after the start of text.
  EXPECT_EQ(parsed, (std::vector<int32_t>{1, 15043, 2, 29871, 3186}));
  const std::vector<int32_t> plain = llama.encode(prompt, {.add_bos = false});
  for (const int32_t id : plain) {
    EXPECT_NE(id, 1);
    EXPECT_NE(id, 2);
  }
  EXPECT_EQ(llama.decode(plain), prompt);
  // The prefix space added after </s> is kept: only the first one is undone.
  EXPECT_EQ(llama.decode(parsed), "Hello  world");
  EXPECT_EQ(llama.decode(parsed, {.render_special = true}), "<s>Hello</s>  world");

  const Tokenizer& gpt2 = Gpt2();
  const std::string text = "Hi<|endoftext|>there";
  const std::vector<int32_t> gpt2_parsed = gpt2.encode(text, {.parse_special = true});
  EXPECT_EQ(gpt2_parsed, (std::vector<int32_t>{17250, 50256, 8117}));
  const std::vector<int32_t> gpt2_plain = gpt2.encode(text);
  EXPECT_GT(gpt2_plain.size(), 3u);
  for (const int32_t id : gpt2_plain) EXPECT_NE(id, 50256);
  EXPECT_EQ(gpt2.decode(gpt2_plain), text);
  EXPECT_EQ(gpt2.decode(gpt2_parsed), "Hithere");
  EXPECT_EQ(gpt2.decode(gpt2_parsed, {.render_special = true}), text);
}

TEST(Tokenizer, LlamaDecodeDropsOnlyTheAddedLeadingSpace) {
  const Tokenizer& t = LlamaSpm();
  for (const std::string text :
       {"Hello", " Hello", "  Hello", " ", "\n", "\xF0\x9F\xA6\x99 llama"}) {
    EXPECT_EQ(t.decode(t.encode(text)), text) << "with BOS: '" << text << "'";
    EXPECT_EQ(t.decode(t.encode(text, {.add_bos = false})), text) << "no BOS: '" << text << "'";
  }
}

TEST(Tokenizer, InvalidUtf8RoundTripsThroughByteTokens) {
  const std::string text = "ok \xFF\xC3( \xE2\x82 end";
  EXPECT_EQ(LlamaSpm().decode(LlamaSpm().encode(text)), text);
  EXPECT_EQ(Gpt2().decode(Gpt2().encode(text)), text);
}

// What holds, with parse_special off and for any byte string x (valid UTF-8
// or not): gpt2 gives decode(encode(x)) == x. llama (add_space_prefix) gives
// the same for any x that contains neither U+2581 nor the text of a
// user-defined token: encode's added "▁" prefix is the one leading space
// decode removes, every other space travels as "▁", and bytes without a
// token travel as <0xNN>. (U+2581 itself decodes as ' '; after a user-defined
// token encode adds another prefix space, which decode keeps.) This vocab has
// no user-defined tokens.
TEST(Tokenizer, RoundTripsMegabytesOfMixedText) {
  for (const Tokenizer* tokenizer : {&LlamaSpm(), &Gpt2()}) {
    size_t n_bytes = 0;
    size_t n_tokens = 0;
    for (uint32_t seed = 0; seed < 48; ++seed) {
      // Chunks from 1 B to ~128 KB so that texts start with every kind of char.
      const std::string text = MixedText(1 + (seed * 2731) % (128 << 10), seed);
      const std::vector<int32_t> ids = tokenizer->encode(text);
      ASSERT_EQ(tokenizer->decode(ids), text) << tokenizer->model_name() << " seed " << seed;
      n_bytes += text.size();
      n_tokens += ids.size();
    }
    std::printf("%s: round trip of %.2f MB in %zu tokens\n",
                std::string(tokenizer->model_name()).c_str(), n_bytes / 1e6, n_tokens);
    EXPECT_GT(n_bytes, 2u << 20);
  }
}

// SpmTokenizer merges word by word for speed; that must change nothing.
TEST(Tokenizer, LlamaWordByWordMergingEqualsOneMergeLoop) {
  auto file = GgufFile::Open(VocabPath("ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  Vocab vocab;
  vocab.texts = (*file)->get_string_array("tokenizer.ggml.tokens").value();
  vocab.scores = (*file)->get_float_array("tokenizer.ggml.scores").value();
  const absl::StatusOr<std::vector<int64_t>> types =
      (*file)->get_int_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.ok()) << types.status();
  for (const int64_t type : *types) vocab.types.push_back(static_cast<TokenType>(type));
  for (size_t id = 0; id < vocab.texts.size(); ++id) {
    vocab.text_to_id.insert_or_assign(vocab.texts[id], static_cast<int32_t>(id));
  }
  const SpmTokenizer spm(vocab);
  ASSERT_TRUE(spm.words_are_independent());
  for (uint32_t seed = 200; seed < 216; ++seed) {
    // Escaped as the facade does: a leading "▁" and every ' ' as "▁"; some
    // seeds also get raw "▁" runs and stray invalid bytes.
    std::string escaped = "\xE2\x96\x81";
    for (const char c : MixedText(8000, seed)) {
      if (c == ' ') {
        escaped += seed % 2 ? "\xE2\x96\x81\xE2\x96\x81" : "\xE2\x96\x81";
      } else {
        escaped.push_back(c);
      }
      if (seed % 4 == 3 && escaped.size() % 97 == 0) escaped += "\xE2\x96";  // truncated ▁
    }
    std::vector<int32_t> by_word;
    std::vector<int32_t> whole;
    spm.encode(escaped, by_word);
    spm.encode_whole(escaped, whole);
    ASSERT_EQ(by_word, whole) << "seed " << seed;
  }
}

// --- Synthetic vocabularies: loading rules and errors ---------------------

struct TinyVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
};

// A byte-level vocab: the 256 GPT-2 alphabet chars, "ab", "abc", two control
// tokens and one user-defined token.
TinyVocab TinyByteLevelVocab() {
  TinyVocab v;
  for (int b = 0; b < 256; ++b) {
    std::string c;
    AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(b)), c);
    v.tokens.push_back(c);
    v.types.push_back(1);
  }
  v.tokens.insert(v.tokens.end(), {"ab", "abc", "<|eot_id|>", "<|begin|>", "[USER]"});
  v.types.insert(v.types.end(), {1, 1, 3, 3, 4});
  v.merges = {"a b", "ab c"};
  return v;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> BuildTokenizer(
    const TinyVocab& v, const std::string& model, const std::string& pre,
    const std::function<void(GgufWriter&)>& extra = nullptr) {
  GgufWriter writer;
  writer.set_string("tokenizer.ggml.model", model);
  if (!pre.empty()) writer.set_string("tokenizer.ggml.pre", pre);
  writer.set_string_array("tokenizer.ggml.tokens", v.tokens);
  writer.set_i32_array("tokenizer.ggml.token_type", v.types);
  if (!v.merges.empty()) writer.set_string_array("tokenizer.ggml.merges", v.merges);
  if (extra) extra(writer);
  BATON_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, writer.write_to_bytes());
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::FromBytes(std::move(bytes)));
  return Tokenizer::FromGguf(*file);
}

TEST(TokenizerLoad, UnknownPreTokenizerNamesValueAndSupported) {
  const auto result = BuildTokenizer(TinyByteLevelVocab(), "gpt2", "gpt-4o");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(result.status().message());
  EXPECT_NE(message.find("'gpt-4o'"), std::string::npos) << message;
  EXPECT_NE(message.find("llama-bpe"), std::string::npos) << message;
  EXPECT_NE(message.find("qwen2"), std::string::npos) << message;
}

TEST(TokenizerLoad, UnknownModelIsAnError) {
  const auto result = BuildTokenizer(TinyByteLevelVocab(), "bert", "");
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("'bert'"), absl::string_view::npos)
      << result.status();
}

TEST(TokenizerLoad, SpecialIdOutsideTheVocabularyIsAnError) {
  const auto result = BuildTokenizer(TinyByteLevelVocab(), "gpt2", "", [](GgufWriter& w) {
    w.set_u32("tokenizer.ggml.eos_token_id", 9999);
  });
  ASSERT_FALSE(result.ok());
  const std::string message(result.status().message());
  EXPECT_NE(message.find("9999"), std::string::npos) << message;
  EXPECT_NE(message.find("261"), std::string::npos) << message;
}

TEST(TokenizerLoad, MismatchedArrayLengthIsAnError) {
  TinyVocab v = TinyByteLevelVocab();
  v.types.pop_back();
  const auto result = BuildTokenizer(v, "gpt2", "");
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("token_type"), absl::string_view::npos);
}

TEST(TokenizerLoad, GptDefaultsAndEotDetection) {
  auto result = BuildTokenizer(TinyByteLevelVocab(), "gpt2", "qwen2");
  ASSERT_TRUE(result.ok()) << result.status();
  const Tokenizer& t = **result;
  EXPECT_EQ(t.pre_tokenizer_name(), "qwen2");
  EXPECT_FALSE(t.add_bos());
  EXPECT_FALSE(t.add_eos());
  EXPECT_EQ(t.eot_id(), 258);  // "<|eot_id|>" is a control token
  EXPECT_TRUE(t.is_eog(258));
  EXPECT_EQ(t.encode("abcab"), (std::vector<int32_t>{257, 256}));
  // Control text becomes its token only with parse_special; user-defined
  // text (an added word) always does, as in llama.cpp and Hugging Face.
  EXPECT_EQ(t.encode("[USER]<|eot_id|>", {.parse_special = true}),
            (std::vector<int32_t>{260, 258}));
  const std::vector<int32_t> plain = t.encode("[USER]<|eot_id|>");
  EXPECT_EQ(plain.front(), 260);
  EXPECT_EQ(plain.size(), 1u + std::string("<|eot_id|>").size());
  EXPECT_EQ(t.decode(plain), "[USER]<|eot_id|>");
  EXPECT_EQ(t.decode(std::vector<int32_t>{260, 258, 257}), "[USER]abc");
}

// Overlapping added-token text resolves as llama.cpp does: longer tokens
// first, each taking its leftmost non-overlapping occurrences.
TEST(TokenizerLoad, OverlappingSpecialTokensAreTakenLongestFirst) {
  TinyVocab v = TinyByteLevelVocab();
  v.tokens.insert(v.tokens.end(), {"<ab>", "<ab>cd>", "b>c"});  // ids 261, 262, 263
  v.types.insert(v.types.end(), {4, 4, 4});
  auto result = BuildTokenizer(v, "gpt2", "");
  ASSERT_TRUE(result.ok()) << result.status();
  const Tokenizer& t = **result;
  // "<ab>cd>" (7 bytes) wins over "<ab>" at the same place; "b>c" then
  // only matches where neither reaches.
  EXPECT_EQ(t.encode("<ab>cd>"), (std::vector<int32_t>{262}));
  // "<ab>" (4 bytes) is taken before "b>c" (3), which it overlaps here...
  EXPECT_EQ(t.encode("<ab>c"), (std::vector<int32_t>{261, 'c'}));
  // ...but not here.
  EXPECT_EQ(t.encode("<ab>xb>c"), (std::vector<int32_t>{261, 'x', 263}));
  EXPECT_EQ(t.encode("<ab>cd><ab><ab>"), (std::vector<int32_t>{262, 261, 261}));
  EXPECT_EQ(t.decode(t.encode("zz<ab>cd>b>c<a")), "zz<ab>cd>b>c<a");
}

TEST(TokenizerLoad, ThousandsOfAddedTokensStayFast) {
  TinyVocab v = TinyByteLevelVocab();
  for (int i = 0; i < 5000; ++i) {
    v.tokens.push_back("<unused" + std::to_string(i) + ">");
    v.types.push_back(i % 2 == 0 ? 4 : 3);
  }
  auto result = BuildTokenizer(v, "gpt2", "");
  ASSERT_TRUE(result.ok()) << result.status();
  const Tokenizer& t = **result;
  const int32_t first_added = 261;
  // <unused42> is user-defined (found always), <unused43> control (only
  // with parse_special), <unused4x no token.
  const std::string line = "<p><unused42> <unused4x <unused43>\n";
  std::string text;
  size_t n_lines = 0;
  for (; text.size() < (1u << 20); ++n_lines) text += line;
  const std::vector<int32_t> ids = t.encode(text);
  size_t n_added = 0;
  for (const int32_t id : ids) n_added += id >= first_added;
  EXPECT_EQ(n_added, n_lines);
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_EQ(t.encode("<unused43>", {.parse_special = true}),
            (std::vector<int32_t>{first_added + 43}));
}

// Llama (SentencePiece) vocabulary with a user-defined token: the text after
// any added token gets the space prefix again, as in llama.cpp.
TEST(TokenizerLoad, LlamaAddsSpacePrefixAfterAddedTokens) {
  TinyVocab v;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    v.tokens.push_back(hex);
    v.types.push_back(6);
  }
  // ids 259..: "▁", "a", "b", "▁a", "[U]"
  v.tokens.insert(v.tokens.end(), {"\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "[U]"});
  v.types.insert(v.types.end(), {1, 1, 1, 1, 4});
  auto result = BuildTokenizer(v, "llama", "", [](GgufWriter& w) {
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  });
  ASSERT_TRUE(result.ok()) << result.status();
  const Tokenizer& t = **result;
  EXPECT_TRUE(t.add_bos());  // llama default
  EXPECT_EQ(t.encode("a[U]b"), (std::vector<int32_t>{1, 262, 263, 259, 261}));
  EXPECT_EQ(t.decode(t.encode("a[U]b")), "a[U] b");
  // "<unk>" is parsed only on request, like control tokens.
  EXPECT_EQ(t.encode("<unk>", {.add_bos = false, .parse_special = true}),
            (std::vector<int32_t>{0}));
  EXPECT_GT(t.encode("<unk>", {.add_bos = false}).size(), 1u);
}

TEST(TokenizerLoad, LlamaBpeTakesWholeWordsThatAreTokens) {
  // "abc" is a token but no merge path reaches it from "a b" "c"... except
  // through "ab c"; drop that merge so only ignore_merges can produce it.
  TinyVocab v = TinyByteLevelVocab();
  v.merges = {"a b"};
  auto llama3 = BuildTokenizer(v, "gpt2", "llama-bpe");
  auto qwen2 = BuildTokenizer(v, "gpt2", "qwen2");
  ASSERT_TRUE(llama3.ok() && qwen2.ok());
  EXPECT_EQ((*llama3)->encode("abc"), (std::vector<int32_t>{257}));
  // Byte b is token b in this vocab.
  EXPECT_EQ((*qwen2)->encode("abc"), (std::vector<int32_t>{256, 'c'}));
}

}  // namespace
}  // namespace baton
