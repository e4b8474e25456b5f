// Vocab: the token table a tokenizer reads from GGUF metadata
// (tokenizer.ggml.tokens / scores / token_type), plus the text -> id index.
// A plain data holder shared by the facade (Tokenizer) and the two model
// algorithms (SpmTokenizer, BpeTokenizer); it is filled in tokenizer.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace baton {

// Values of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // BOS, EOS, chat markers: never produced from plain text
  kUserDefined = 4,  // added tokens that decode verbatim
  kUnused = 5,
  kByte = 6,         // "<0xNN>": SentencePiece byte fallback
};

struct Vocab {
  // Hash that lets the map be searched with a std::string_view, no copy.
  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
  };

  std::vector<std::string> texts;  // [n_vocab] token text as stored (▁ / Ġ-escaped)
  std::vector<float> scores;       // [n_vocab] SentencePiece log-probabilities; 0 if absent
  std::vector<TokenType> types;    // [n_vocab]; kNormal where the file has none
  // Token text -> id; for duplicate texts the last id wins (as in llama.cpp).
  std::unordered_map<std::string, int32_t, TextHash, std::equal_to<>> text_to_id;

  int32_t n_vocab() const { return static_cast<int32_t>(texts.size()); }
  bool is_valid(int32_t id) const { return id >= 0 && id < n_vocab(); }
  // -1 when `text` is not a token.
  int32_t find(std::string_view text) const {
    const auto it = text_to_id.find(text);
    return it == text_to_id.end() ? -1 : it->second;
  }
};

}  // namespace baton
