// Tokenizers of the model families people download, on the vocab-only GGUFs
// of tests/data/vocab (made by gen_family_vocabs.py; README there):
//   Gemma 3   SentencePiece, no space prefix, byte fallback, its specials at
//             their real ids (<start_of_turn> 105, <end_of_turn> 106)
//   Phi-3     SentencePiece in Llama 2's layout, added tokens 32000-32063
//   Qwen3     byte-level BPE (pre qwen2), <think> / </think> added words
//   Llama 3.2 byte-level BPE (pre llama-bpe), its 256 specials
// What must hold, worked out by hand from the vocabularies: the special ids
// and flags, which tokens end generation (as llama.cpp derives its EOG set),
// special text parsed only with parse_special (added words always), byte
// fallback for characters outside the vocabulary, no leading space for
// Gemma, and decode / streaming decode giving the text back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/gguf/gguf_file.h"
#include "common/gguf/gguf_writer.h"
#include "common/tokenizer/streaming_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/check.h"
#include "tests/unit/tokenizer_test_util.h"

namespace baton {
namespace {

using testing_tokenizer::VocabPath;
using Ids = std::vector<int32_t>;

std::unique_ptr<Tokenizer> Load(const std::string& name) {
  auto file = GgufFile::Open(VocabPath(name));
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return nullptr;
  auto tokenizer = Tokenizer::FromGguf(**file);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

const Tokenizer& Gemma() {
  static const std::unique_ptr<Tokenizer> t = Load("gemma3-like.gguf");
  return *t;
}
const Tokenizer& Phi3() {
  static const std::unique_ptr<Tokenizer> t = Load("phi3-like.gguf");
  return *t;
}
const Tokenizer& Qwen3() {
  static const std::unique_ptr<Tokenizer> t = Load("qwen3-like.gguf");
  return *t;
}
const Tokenizer& Llama32() {
  static const std::unique_ptr<Tokenizer> t = Load("llama32-like.gguf");
  return *t;
}

// Id of the token whose stored text is `text` (a vocabulary lookup, not the
// algorithm under test); -1 with a test failure when there is none.
int32_t Id(const Tokenizer& t, const std::string& text) {
  for (int32_t id = 0; id < t.n_vocab(); ++id) {
    if (t.token_text(id) == text) return id;
  }
  ADD_FAILURE() << "no token '" << text << "'";
  return -1;
}

std::string Streamed(const Tokenizer& t, const Ids& ids) {
  StreamingDecoder decoder(t);
  std::string out;
  for (const int32_t id : ids) out += decoder.push(id);
  return out + decoder.flush();
}

constexpr EncodeOptions kNoBos{.add_bos = false};
constexpr EncodeOptions kSpecialNoBos{.add_bos = false, .parse_special = true};
const std::string kSp = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// --- Gemma 3 -----------------------------------------------------------------

TEST(TokenizerFamilies, GemmaSpecialIdsAndFlags) {
  const Tokenizer& t = Gemma();
  EXPECT_EQ(t.model_name(), "llama");
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_EQ(t.eos_id(), 1);
  EXPECT_EQ(t.bos_id(), 2);
  EXPECT_EQ(t.unk_id(), 3);
  EXPECT_EQ(t.token_text(105), "<start_of_turn>");
  EXPECT_EQ(t.token_text(106), "<end_of_turn>");
  EXPECT_TRUE(t.add_bos());
  EXPECT_FALSE(t.add_space_prefix());
  EXPECT_EQ(t.eot_id(), 106);
  // <eos> and <end_of_turn> end generation; <start_of_turn> does not.
  EXPECT_EQ(t.eog_ids(), (Ids{1, 106}));
  EXPECT_EQ(t.encode("Hello").front(), 2);  // BOS by the file's rule
}

TEST(TokenizerFamilies, GemmaHasNoLeadingSpace) {
  const Tokenizer& t = Gemma();
  // With a space prefix the first word would be "▁Hello".
  EXPECT_EQ(t.encode("Hello world", kNoBos), (Ids{Id(t, "Hello"), Id(t, kSp + "world")}));
  EXPECT_EQ(t.encode(" Hello", kNoBos), (Ids{Id(t, kSp + "Hello")}));
  EXPECT_EQ(t.encode("    The", kNoBos), (Ids{Id(t, kSp + kSp + kSp + kSp), Id(t, "The")}));
  EXPECT_EQ(t.encode("\n\nHello", kNoBos), (Ids{Id(t, "\n\n"), Id(t, "Hello")}));
  // decode keeps a leading space (nothing was added to remove).
  EXPECT_EQ(t.decode(t.encode(" Hello world", kNoBos)), " Hello world");
}

TEST(TokenizerFamilies, GemmaSpecialsOnlyWithParseSpecial) {
  const Tokenizer& t = Gemma();
  const std::string text = "<start_of_turn>Hello<end_of_turn>";
  // No space prefix after a special token either.
  EXPECT_EQ(t.encode(text, kSpecialNoBos), (Ids{105, Id(t, "Hello"), 106}));
  const Ids plain = t.encode(text, kNoBos);
  for (const int32_t id : plain) EXPECT_TRUE(id != 105 && id != 106) << id;
  EXPECT_EQ(plain.front(), Id(t, "<0x3C>"));  // '<' has no piece: byte fallback
  EXPECT_EQ(t.decode(plain), text);
  // A user-defined token (<start_of_image>) is found with parse_special off.
  EXPECT_EQ(t.encode("a<start_of_image>", kNoBos), (Ids{Id(t, "a"), Id(t, "<start_of_image>")}));
  // Control tokens decode to nothing unless asked.
  EXPECT_EQ(t.decode(Ids{105, Id(t, "Hello"), 106}), "Hello");
  EXPECT_EQ(t.decode(Ids{105, Id(t, "Hello"), 106}, {.render_special = true}),
            "<start_of_turn>Hello<end_of_turn>");
}

TEST(TokenizerFamilies, GemmaByteFallbackOutsideTheVocabulary) {
  const Tokenizer& t = Gemma();
  // U+20AC and U+1F600 have no piece: one <0xNN> token per UTF-8 byte.
  EXPECT_EQ(t.encode("\xE2\x82\xAC", kNoBos), (Ids{Id(t, "<0xE2>"), Id(t, "<0x82>"), Id(t, "<0xAC>")}));
  EXPECT_EQ(t.encode("\xF0\x9F\x98\x80", kNoBos),
            (Ids{Id(t, "<0xF0>"), Id(t, "<0x9F>"), Id(t, "<0x98>"), Id(t, "<0x80>")}));
  // Pieces that exist win over bytes: "café" = "caf" + "é", "中文" one piece.
  EXPECT_EQ(t.encode("caf\xC3\xA9", kNoBos), (Ids{Id(t, "caf"), Id(t, "\xC3\xA9")}));
  EXPECT_EQ(t.encode("\xE4\xB8\xAD\xE6\x96\x87", kNoBos), (Ids{Id(t, "\xE4\xB8\xAD\xE6\x96\x87")}));
}

TEST(TokenizerFamilies, RoundTripsThroughTheStreamingDecoder) {
  const std::vector<std::string> texts = {
      "Hello world", " The model is a caf\xC3\xA9 \xE2\x82\xAC 5!", "\xF0\x9F\x98\x80\n\n\xE4\xB8\xAD\xE6\x96\x87 x",
      "  two  spaces\tand a tab", "<think>\nplan\n</think>\n\nanswer"};
  for (const Tokenizer* t : {&Gemma(), &Phi3(), &Qwen3(), &Llama32()}) {
    for (const std::string& text : texts) {
      const Ids ids = t->encode(text, kNoBos);
      EXPECT_EQ(t->decode(ids), text) << t->model_name() << " " << t->n_vocab();
      EXPECT_EQ(Streamed(*t, ids), text) << t->model_name() << " " << t->n_vocab();
    }
  }
}

// --- Phi-3 -------------------------------------------------------------------

TEST(TokenizerFamilies, Phi3AddedTokensAndEndOfGeneration) {
  const Tokenizer& t = Phi3();
  EXPECT_EQ(t.n_vocab(), 32064);
  EXPECT_EQ(t.token_text(32000), "<|endoftext|>");
  EXPECT_EQ(t.token_text(32001), "<|assistant|>");
  EXPECT_EQ(t.token_text(32006), "<|system|>");
  EXPECT_EQ(t.token_text(32007), "<|end|>");
  EXPECT_EQ(t.token_text(32010), "<|user|>");
  EXPECT_EQ(t.eos_id(), 32000);
  EXPECT_TRUE(t.add_space_prefix());
  // The file names only <|endoftext|>; a Phi-3 turn ends with <|end|>.
  EXPECT_EQ(t.eog_ids(), (Ids{32000, 32007}));
  EXPECT_FALSE(t.is_eog(32001));
  // Llama 2 style: a space before the first word and after a special token.
  EXPECT_EQ(t.encode("Hello world", kNoBos), (Ids{Id(t, kSp + "Hello"), Id(t, kSp + "world")}));
  EXPECT_EQ(t.encode("<|user|>Hello<|end|>", kSpecialNoBos), (Ids{32010, Id(t, kSp + "Hello"), 32007}));
  const Ids plain = t.encode("<|user|>", kNoBos);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 32010), 0);
  EXPECT_EQ(t.decode(plain), "<|user|>");
}

// --- Qwen3 -------------------------------------------------------------------

TEST(TokenizerFamilies, Qwen3AddedTokensAndEndOfGeneration) {
  const Tokenizer& t = Qwen3();
  EXPECT_EQ(t.model_name(), "gpt2");
  EXPECT_EQ(t.pre_tokenizer_name(), "qwen2");
  EXPECT_FALSE(t.add_bos());
  const int32_t endoftext = Id(t, "<|endoftext|>");
  const int32_t im_start = Id(t, "<|im_start|>");
  const int32_t im_end = Id(t, "<|im_end|>");
  const int32_t think = Id(t, "<think>");
  const int32_t end_think = Id(t, "</think>");
  EXPECT_EQ(im_start, endoftext + 1);  // Qwen3's order: 151643, 151644, ...
  EXPECT_EQ(end_think, endoftext + 25);
  EXPECT_EQ(t.eos_id(), im_end);
  // The file names <|im_end|>; <|endoftext|> (the base model's end) stops too.
  EXPECT_EQ(t.eog_ids(), (Ids{endoftext, im_end}));
  EXPECT_FALSE(t.is_eog(end_think));
  EXPECT_EQ(t.encode("Hello world"), (Ids{Id(t, "Hello"), Id(t, "\xC4\xA0world")}));
  // <|im_start|> is a control token: only with parse_special.
  EXPECT_EQ(t.encode("<|im_start|>user", kSpecialNoBos), (Ids{im_start, Id(t, "user")}));
  const Ids plain = t.encode("<|im_start|>");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), im_start), 0);
  // <think> and </think> are added words (special: false in Qwen3's
  // tokenizer): found in any text, as Hugging Face and llama.cpp do.
  EXPECT_EQ(t.encode("<think>\n\n</think>\n\n"), (Ids{think, Id(t, "\xC4\x8A\xC4\x8A"), end_think,
                                                      Id(t, "\xC4\x8A\xC4\x8A")}));
  EXPECT_EQ(t.decode(Ids{think, Id(t, "think"), end_think}), "<think>think</think>");
}

// --- Llama 3.2 ---------------------------------------------------------------

TEST(TokenizerFamilies, Llama32SpecialTokens) {
  const Tokenizer& t = Llama32();
  EXPECT_EQ(t.pre_tokenizer_name(), "llama-bpe");
  constexpr int32_t kBase = 768;  // Llama 3.2: 128000
  EXPECT_EQ(t.token_text(kBase + 0), "<|begin_of_text|>");
  EXPECT_EQ(t.token_text(kBase + 6), "<|start_header_id|>");
  EXPECT_EQ(t.token_text(kBase + 10), "<|python_tag|>");
  EXPECT_EQ(t.bos_id(), kBase);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.eos_id(), kBase + 9);  // <|eot_id|>
  EXPECT_EQ(t.eom_id(), kBase + 8);  // <|eom_id|>, found by its text
  // <|end_of_text|>, <|eom_id|> and <|eot_id|> end generation; the headers
  // and <|python_tag|> do not.
  EXPECT_EQ(t.eog_ids(), (Ids{kBase + 1, kBase + 8, kBase + 9}));
  EXPECT_EQ(t.encode("<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>", {.parse_special = true}),
            (Ids{kBase, kBase + 6, Id(t, "user"), kBase + 7, Id(t, "\xC4\x8A\xC4\x8A"), Id(t, "Hello"),
                 kBase + 9}));
}

// tokenizer.ggml.eom_token_id is read (and checked) when the file has it.
absl::StatusOr<std::unique_ptr<Tokenizer>> Llama32WithEom(uint32_t eom) {
  auto file = GgufFile::Open(VocabPath("llama32-like.gguf"));
  if (!file.ok()) return file.status();
  GgufWriter writer;
  for (const auto& [key, value] : (*file)->metadata()) writer.set(key, value);
  writer.set_u32("tokenizer.ggml.eom_token_id", eom);
  BATON_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, writer.write_to_bytes());
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> copy, GgufFile::FromBytes(std::move(bytes)));
  return Tokenizer::FromGguf(*copy);
}

TEST(TokenizerFamilies, EomKeyIsReadAndChecked) {
  auto with_key = Llama32WithEom(778);  // <|python_tag|>, for the test's sake
  ASSERT_TRUE(with_key.ok()) << with_key.status();
  EXPECT_EQ((*with_key)->eom_id(), 778);
  EXPECT_TRUE((*with_key)->is_eog(778));
  auto outside = Llama32WithEom(1024);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("eom_token_id is 1024"), std::string::npos) << outside.status();
}

}  // namespace
}  // namespace baton
