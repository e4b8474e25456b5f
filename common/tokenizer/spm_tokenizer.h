// SpmTokenizer: SentencePiece-style BPE driven by token scores, the algorithm
// of llama.cpp's llm_tokenizer_spm (Llama 1/2, Mistral, TinyLlama vocabularies).
// Starting from single UTF-8 characters it repeatedly merges the adjacent pair
// whose concatenation is a vocabulary token with the highest score (ties: the
// leftmost pair); characters left without a token fall back to <0xNN> byte
// tokens. Only normal and user-defined tokens take part in merges, so plain
// text never turns into a control token.
//
// Speed: one heap over a long text is slow (cache misses on ~1M entries), so
// when no mergeable token has a "▁" right after another character (true of
// the Llama 2 vocabulary), no merge can cross the boundary before a word's
// "▁"; each word is then merged on its own, with the same result.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/tokenizer/vocab.h"

namespace baton {

class SpmTokenizer {
 public:
  // `vocab` must outlive this object.
  explicit SpmTokenizer(const Vocab& vocab);

  // Appends the ids of `text` to `out`. `text` is already escaped: the space
  // prefix added and spaces replaced by U+2581 (the facade does that).
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  // The reference form of encode(): one merge loop over the whole text, never
  // cut into words. encode() must give the same ids (tested); slow on long text.
  void encode_whole(std::string_view text, std::vector<int32_t>& out) const;

  // Whether encode() merges word by word (see the class comment).
  bool words_are_independent() const { return words_are_independent_; }

  // Id used for byte `b` when a character has no token: "<0xNN>", else the
  // one-byte token, else the unknown token; -1 if none of these exists.
  int32_t byte_token(uint8_t b) const { return byte_to_id_[b]; }

 private:
  // Id of `text` if it is a token that merges may produce, else -1.
  int32_t mergeable_id(std::string_view text) const;
  // The merge loop over one independent piece of the text.
  void encode_chunk(std::string_view text, std::vector<int32_t>& out) const;

  const Vocab& vocab_;
  std::array<int32_t, 256> byte_to_id_;
  // No mergeable token has "▁" after a non-"▁" character: text may be cut
  // before every "▁" that follows another character.
  bool words_are_independent_ = false;
};

}  // namespace baton
