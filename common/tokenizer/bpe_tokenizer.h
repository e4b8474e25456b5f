// BpeTokenizer: GPT-2 style byte-level BPE (GPT-2, Llama 3, Qwen2), the
// algorithm of llama.cpp's llm_tokenizer_bpe. The pre-tokenizer splits the
// text into words; each word's bytes become GPT-2 alphabet characters (one
// per byte), and the adjacent pair with the lowest merge rank (its index in
// tokenizer.ggml.merges; ties: the leftmost pair) is merged until no pair is
// in the merge list.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/vocab.h"

namespace baton {

class BpeTokenizer {
 public:
  // `merges`: tokenizer.ggml.merges, "left right" in rank order. Merges whose
  // parts or result are not tokens can never fire and are dropped. `vocab`
  // must outlive the result.
  static absl::StatusOr<BpeTokenizer> Create(const Vocab& vocab,
                                             const std::vector<std::string>& merges,
                                             PreTokenizer pre_tokenizer);

  // Appends the ids of `text` to `out`.
  void encode(std::string_view text, std::vector<int32_t>& out) const;

  const PreTokenizer& pre_tokenizer() const { return pre_tokenizer_; }
  int32_t n_merges() const { return static_cast<int32_t>(merges_.size()); }

 private:
  struct Merge {
    int32_t rank;       // index in tokenizer.ggml.merges; lower merges first
    int32_t result_id;  // token of left + right
  };
  static uint64_t PairKey(int32_t left_id, int32_t right_id) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left_id)) << 32) |
           static_cast<uint32_t>(right_id);
  }

  BpeTokenizer(const Vocab& vocab, PreTokenizer pre_tokenizer)
      : vocab_(&vocab), pre_tokenizer_(pre_tokenizer) {}

  // Merges one pre-tokenized word and appends its ids.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  const Vocab* vocab_;
  PreTokenizer pre_tokenizer_;
  // Token of each byte's GPT-2 character, else the unknown token, else -1.
  std::array<int32_t, 256> byte_to_id_;
  std::unordered_map<uint64_t, Merge> merges_;  // PairKey(left id, right id) -> merge
};

}  // namespace baton
