#include "common/tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "common/tokenizer/unicode.h"

namespace baton {
namespace {

// A run of the text that is (so far) one token; merged-away symbols keep
// n_bytes == 0. prev/next link the live symbols (-1 at the ends).
struct Symbol {
  size_t offset;    // bytes into the text
  size_t n_bytes;
  int32_t prev;
  int32_t next;
};

// A candidate merge of two adjacent symbols.
struct Bigram {
  int32_t left;
  int32_t right;
  float score;
  size_t n_bytes;  // left + right when queued; stale if either changed since
};

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

// True when `text` has a "▁" preceded by something other than "▁".
bool HasSpaceAfterOtherChar(std::string_view text) {
  for (size_t pos = text.find(kSpmSpace, 1); pos != std::string_view::npos;
       pos = text.find(kSpmSpace, pos + 1)) {
    if (pos < kSpmSpace.size() ||
        text.substr(pos - kSpmSpace.size(), kSpmSpace.size()) != kSpmSpace) {
      return true;
    }
  }
  return false;
}

// Max-heap order: highest score first, then the leftmost pair.
bool LowerPriority(const Bigram& a, const Bigram& b) {
  return a.score < b.score || (a.score == b.score && a.left > b.left);
}

}  // namespace

SpmTokenizer::SpmTokenizer(const Vocab& vocab) : vocab_(vocab) {
  const int32_t unk = [&] {
    for (int32_t id = 0; id < vocab.n_vocab(); ++id) {
      if (vocab.types[id] == TokenType::kUnknown) return id;
    }
    return -1;
  }();
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    int32_t id = vocab.find(hex);
    if (id < 0) id = vocab.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    byte_to_id_[b] = id >= 0 ? id : unk;
  }
  words_are_independent_ = true;
  for (int32_t id = 0; id < vocab.n_vocab() && words_are_independent_; ++id) {
    if (mergeable_id(vocab.texts[id]) == id && HasSpaceAfterOtherChar(vocab.texts[id])) {
      words_are_independent_ = false;
    }
  }
}

int32_t SpmTokenizer::mergeable_id(std::string_view text) const {
  const int32_t id = vocab_.find(text);
  if (id < 0) return -1;
  const TokenType type = vocab_.types[id];
  return type == TokenType::kNormal || type == TokenType::kUserDefined ? id : -1;
}

void SpmTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (!words_are_independent_) {
    encode_chunk(text, out);
    return;
  }
  // Cut before each "▁" that follows another character. Characters are
  // walked exactly as encode_chunk splits them, so cuts fall on symbol
  // boundaries (a valid "▁" always starts a character: 0xE2 is a lead byte).
  size_t chunk_begin = 0;
  bool previous_is_space = true;
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = DecodeUtf8(text, pos);
    const bool is_space = c.valid && c.code_point == 0x2581;
    if (is_space && !previous_is_space) {
      encode_chunk(text.substr(chunk_begin, pos - chunk_begin), out);
      chunk_begin = pos;
    }
    previous_is_space = is_space;
    pos += c.n_bytes;
  }
  if (chunk_begin < text.size()) encode_chunk(text.substr(chunk_begin), out);
}

void SpmTokenizer::encode_whole(std::string_view text, std::vector<int32_t>& out) const {
  encode_chunk(text, out);
}

void SpmTokenizer::encode_chunk(std::string_view text, std::vector<int32_t>& out) const {
  // Scratch reused across chunks of one thread, so short words cost no allocation.
  thread_local std::vector<Symbol> symbols;  // one per UTF-8 character of `text` to start
  thread_local std::vector<Bigram> heap;
  symbols.clear();
  heap.clear();
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = DecodeUtf8(text, pos).n_bytes;
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({pos, n, index - 1, pos + n == text.size() ? -1 : index + 1});
    pos += n;
  }

  auto try_add_bigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t n_bytes = symbols[left].n_bytes + symbols[right].n_bytes;
    const int32_t id = mergeable_id(text.substr(symbols[left].offset, n_bytes));
    if (id < 0) return;
    heap.push_back({left, right, vocab_.scores[id], n_bytes});
    std::push_heap(heap.begin(), heap.end(), LowerPriority);
  };
  for (size_t i = 1; i < symbols.size(); ++i) {
    try_add_bigram(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  }

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), LowerPriority);
    const Bigram bigram = heap.back();
    heap.pop_back();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Skip pairs where a side was merged away or grew since it was queued.
    if (left.n_bytes == 0 || right.n_bytes == 0 ||
        left.n_bytes + right.n_bytes != bigram.n_bytes) {
      continue;
    }
    left.n_bytes += right.n_bytes;
    right.n_bytes = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add_bigram(left.prev, bigram.left);
    try_add_bigram(bigram.left, left.next);
  }

  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].offset, symbols[i].n_bytes);
    const int32_t id = mergeable_id(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (const char c : piece) {
      const int32_t byte_id = byte_to_id_[static_cast<uint8_t>(c)];
      if (byte_id >= 0) out.push_back(byte_id);
    }
  }
}

}  // namespace baton
