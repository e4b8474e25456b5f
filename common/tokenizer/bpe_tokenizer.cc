#include "common/tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include "common/tokenizer/unicode.h"
#include "common/util/log.h"

namespace baton {
namespace {

// A run of the word that is one token; merged-away symbols have id -1 and
// dead == true. prev/next link the live symbols (-1 at the ends).
struct Symbol {
  int32_t id;  // token id; -1 for a byte without a token (never merges)
  int32_t prev;
  int32_t next;
  bool dead;
};

struct Bigram {
  int32_t left;
  int32_t right;
  int32_t rank;
  int32_t left_id;   // ids when queued; the pair is stale if either changed
  int32_t right_id;
  int32_t result_id;
};

// Max-heap order: lowest rank first, then the leftmost pair.
bool LowerPriority(const Bigram& a, const Bigram& b) {
  return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
}

}  // namespace

absl::StatusOr<BpeTokenizer> BpeTokenizer::Create(const Vocab& vocab,
                                                  const std::vector<std::string>& merges,
                                                  PreTokenizer pre_tokenizer) {
  BpeTokenizer tokenizer(vocab, pre_tokenizer);
  // A byte whose alphabet character is not a token (a malformed vocabulary)
  // becomes the unknown token, as in llama.cpp; with no unknown token either
  // it is dropped, which the warning below reports.
  int32_t unk_id = -1;
  for (int32_t id = 0; id < vocab.n_vocab() && unk_id < 0; ++id) {
    if (vocab.types[id] == TokenType::kUnknown) unk_id = id;
  }
  std::string character;
  int n_bytes_without_token = 0;
  for (int b = 0; b < 256; ++b) {
    character.clear();
    AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(b)), character);
    tokenizer.byte_to_id_[b] = vocab.find(character);
    if (tokenizer.byte_to_id_[b] < 0) {
      tokenizer.byte_to_id_[b] = unk_id;
      ++n_bytes_without_token;
    }
  }
  if (n_bytes_without_token > 0) {
    BATON_WARN("%d of 256 bytes have no byte-level token; they encode as %s",
               n_bytes_without_token, unk_id >= 0 ? "the unknown token" : "nothing");
  }
  tokenizer.merges_.reserve(merges.size());
  size_t n_dropped = 0;
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& merge = merges[rank];
    // Split at the first space after the first byte, as llama.cpp does.
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos) {
      ++n_dropped;
      continue;
    }
    const std::string_view left = std::string_view(merge).substr(0, space);
    const std::string_view right = std::string_view(merge).substr(space + 1);
    joined.assign(left);
    joined.append(right);
    const int32_t left_id = vocab.find(left);
    const int32_t right_id = vocab.find(right);
    const int32_t result_id = vocab.find(joined);
    if (left_id < 0 || right_id < 0 || result_id < 0) {
      ++n_dropped;
      continue;
    }
    // A repeated pair keeps its first (lowest) rank.
    tokenizer.merges_.try_emplace(PairKey(left_id, right_id),
                                  Merge{static_cast<int32_t>(rank), result_id});
  }
  if (n_dropped > 0) {
    BATON_WARN("dropped %zu of %zu merges whose parts or result are not tokens", n_dropped,
               merges.size());
  }
  return tokenizer;
}

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::string_view> words;
  pre_tokenizer_.split(text, words);
  for (const std::string_view word : words) encode_word(word, out);
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (pre_tokenizer_.ignores_merges()) {
    // Llama 3: a word that is itself a token is taken whole.
    std::string mapped;
    for (const char c : word) AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(c)), mapped);
    const int32_t id = vocab_->find(mapped);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  // Scratch reused across words of one thread, so short words cost no allocation.
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Bigram> heap;
  symbols.clear();
  heap.clear();
  const auto n = static_cast<int32_t>(word.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols.push_back({byte_to_id_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1,
                       false});
  }
  auto try_add_bigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t left_id = symbols[left].id;
    const int32_t right_id = symbols[right].id;
    if (left_id < 0 || right_id < 0) return;
    const auto it = merges_.find(PairKey(left_id, right_id));
    if (it == merges_.end()) return;
    heap.push_back({left, right, it->second.rank, left_id, right_id, it->second.result_id});
    std::push_heap(heap.begin(), heap.end(), LowerPriority);
  };
  for (int32_t i = 1; i < n; ++i) try_add_bigram(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), LowerPriority);
    const Bigram bigram = heap.back();
    heap.pop_back();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.dead || right.dead || left.id != bigram.left_id || right.id != bigram.right_id) {
      continue;  // stale: a side was merged away or changed since queued
    }
    left.id = bigram.result_id;
    right.dead = true;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add_bigram(left.prev, bigram.left);
    try_add_bigram(bigram.left, left.next);
  }

  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = symbols[i].next) {
    if (symbols[i].id >= 0) out.push_back(symbols[i].id);
  }
}

}  // namespace baton
