// PreTokenizer: splits text into the "words" a byte-level BPE model merges
// inside, following the split regexes that `tokenizer.ggml.pre` names. The
// regexes are implemented as hand-written matchers over code points (the same
// approach as llama.cpp's unicode.cpp) so no regex engine is needed. Some
// kinds are a sequence of regexes: each splits every piece the previous one
// left (a piece's end is the end of the input for it), and the text between
// two matches stays a piece of its own, as llama.cpp's unicode_regex_split
// and Hugging Face's Sequence of Split(behavior=Isolated) do.
//
//   gpt2      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   llama-bpe (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//             ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2     as llama-bpe, but \p{N} (one digit per word)
//   tekken    [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|
//             [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|
//             \p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//             (the published pattern; llama.cpp approximates its case classes)
// Sequences, regex after regex:
//   deepseek-llm   [\r\n] ; \s?[LETTERS]+ ; \s?[!-/:-~！-／：-～‘-‟　-。]+ ; \s+$ ;
//                  [一-龥ࠀ-一가-퟿]+ ; \p{N}+   (LETTERS: an explicit list of
//                  cased-letter ranges, see kDeepseekLetters)
//   deepseek-coder [\r\n] ; \s?\p{L}+ ; \s?\p{P}+ ; [一-龥ࠀ-一가-퟿]+ ; \p{N}
//   falcon         [\p{P}\$\+<=>\^~\|`]+ ; gpt2 ; [0-9][0-9][0-9]
//   starcoder      \p{N} ; gpt2
//
// Invalid UTF-8 bytes are kept (a word never splits a byte sequence apart
// from how it was given) and classified like U+FFFD, a symbol.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace baton {

enum class PreTokenizerKind {
  kGpt2,           // GPT-2 and most early byte-level BPE models
  kLlama3,         // Llama 3 ("llama-bpe"): digits in groups of up to three
  kQwen2,          // Qwen2, Qwen2.5, Qwen3, DeepSeek-R1 Qwen distills: single digits
  kDeepseekLlm,    // DeepSeek LLM 7B/67B: explicit letter ranges, CJK runs
  kDeepseekCoder,  // DeepSeek Coder 1.x: \p{L}, \p{P}, CJK runs, single digits
  kFalcon,         // Falcon 7B/40B: punctuation runs, gpt2, ASCII digit triples
  kStarcoder,      // StarCoder, Refact, SmolLM, Command-R: single digits, then gpt2
  kTekken,         // Mistral Nemo and later Mistral models: letter words follow case
};

class PreTokenizer {
 public:
  // `name` is the value of tokenizer.ggml.pre; empty means absent (gpt2).
  // Accepted: "gpt2", "gpt-2", "llama-bpe", "llama3", "llama-v3", "qwen2",
  // "deepseek-r1-qwen", "deepseek-llm", "deepseek-coder", "falcon",
  // "starcoder", "refact", "smollm", "command-r", "tekken" (the names
  // llama.cpp gives these patterns). Anything else is InvalidArgumentError
  // naming the value and these: a wrong split would tokenize subtly wrong.
  static absl::StatusOr<PreTokenizer> FromName(std::string_view name);

  explicit PreTokenizer(PreTokenizerKind kind) : kind_(kind) {}

  PreTokenizerKind kind() const { return kind_; }
  // Canonical name of the kind: "gpt2", "llama-bpe", "qwen2", "deepseek-llm",
  // "deepseek-coder", "falcon", "starcoder" or "tekken".
  std::string_view name() const;
  // True for llama-bpe and tekken, whose tokenizers look a whole word up in
  // the vocab before merging (Hugging Face `ignore_merges`; llama.cpp sets it
  // for these two).
  bool ignores_merges() const {
    return kind_ == PreTokenizerKind::kLlama3 || kind_ == PreTokenizerKind::kTekken;
  }

  // Splits `text` into words: views into `text`, in order, non-empty, whose
  // concatenation is `text`. Appends to `words` (cleared first).
  void split(std::string_view text, std::vector<std::string_view>& words) const;
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  PreTokenizerKind kind_;
};

}  // namespace baton
