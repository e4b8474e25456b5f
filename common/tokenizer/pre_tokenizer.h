// PreTokenizer: splits text into the "words" a byte-level BPE model merges
// inside, following the split regex that `tokenizer.ggml.pre` names. The
// regexes are implemented as hand-written matchers over code points (the same
// approach as llama.cpp's unicode.cpp) so no regex engine is needed:
//
//   gpt2      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   llama-bpe (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//             ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2     as llama-bpe, but \p{N} (one digit per word)
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
  kGpt2,      // GPT-2 and most early byte-level BPE models
  kLlama3,    // Llama 3 ("llama-bpe"): digits in groups of up to three
  kQwen2,     // Qwen2: single digits
};

class PreTokenizer {
 public:
  // `name` is the value of tokenizer.ggml.pre; empty means absent (gpt2).
  // Accepted: "gpt2", "gpt-2", "llama-bpe", "llama3", "llama-v3", "qwen2".
  // Anything else is InvalidArgumentError naming the value and these.
  static absl::StatusOr<PreTokenizer> FromName(std::string_view name);

  explicit PreTokenizer(PreTokenizerKind kind) : kind_(kind) {}

  PreTokenizerKind kind() const { return kind_; }
  // Canonical name: "gpt2", "llama-bpe" or "qwen2".
  std::string_view name() const;
  // True for llama-bpe, whose tokenizer looks a whole word up in the vocab
  // before merging (Hugging Face `ignore_merges`).
  bool ignores_merges() const { return kind_ == PreTokenizerKind::kLlama3; }

  // Splits `text` into words: views into `text`, in order, non-empty, whose
  // concatenation is `text`. Appends to `words` (cleared first).
  void split(std::string_view text, std::vector<std::string_view>& words) const;
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  PreTokenizerKind kind_;
};

}  // namespace baton
