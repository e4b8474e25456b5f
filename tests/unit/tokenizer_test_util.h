// Shared helpers for the tokenizer tests: locating tests/data/vocab and
// generating deterministic mixed-script text.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <random>
#include <string>

#include "common/tokenizer/unicode.h"

namespace baton::testing_tokenizer {

// tests/data/vocab/NAME: $BATON_SOURCE_DIR (set by ctest) first, else the
// compile-time source directory.
inline std::string VocabPath(const std::string& name) {
  const char* env = std::getenv("BATON_SOURCE_DIR");
  const std::string root = env != nullptr && env[0] != '\0' ? env : BATON_SOURCE_DIR;
  return root + "/tests/data/vocab/" + name;
}

// Deterministic text of about `n_bytes` bytes mixing ASCII prose,
// punctuation, digit runs, whitespace runs (spaces, tabs, \n, \r\n),
// accented Latin, CJK, emoji (with ZWJ / VS16) and random valid code points.
// Never contains U+2581 (SentencePiece's space mark), which the llama
// tokenizer cannot round-trip.
inline std::string MixedText(size_t n_bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  static const char* const kWords[] = {
      "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "tokenizer", "model",
      "inference", "edge", "cloud", "prefill", "decode", "cache", "I've", "don't", "they'll",
      "HE'S", "Hello", "World", "a", "an", "of", "to", "in", "is", "that", "split"};
  static const char* const kPunct[] = {".", ",", "!", "?", "...", "--", "(", ")", "\"", "'",
                                       ";", ":", "``", "<<>>", "#", "$", "%", "&&", "@", "~"};
  static const char32_t kAccented[] = {0xE9, 0xE8, 0xEA, 0xF1, 0xFC, 0xF6, 0xE7, 0xDF,
                                       0xC5, 0x153, 0x1EED, 0x1EC7, 0x301, 0x308};
  std::string text;
  auto pick = [&](uint32_t n) { return rng() % n; };
  while (text.size() < n_bytes) {
    switch (pick(10)) {
      case 0: case 1: case 2: case 3:
        text += kWords[pick(std::size(kWords))];
        text += ' ';
        break;
      case 4:
        text += kPunct[pick(std::size(kPunct))];
        break;
      case 5:
        for (uint32_t i = 0, n = 1 + pick(12); i < n; ++i)
          text.push_back(static_cast<char>('0' + pick(10)));
        break;
      case 6: {
        static const char* const kSpaces[] = {" ",    "  ",   "   ",  "\t",   "\n",
                                              "\n\n", "\r\n", " \n ", "\t \t"};
        text += kSpaces[pick(std::size(kSpaces))];
        break;
      }
      case 7:
        for (uint32_t i = 0, n = 1 + pick(6); i < n; ++i) {
          AppendUtf8(pick(2) ? kAccented[pick(std::size(kAccented))] : 'a' + pick(26), text);
        }
        break;
      case 8:
        for (uint32_t i = 0, n = 1 + pick(8); i < n; ++i) AppendUtf8(0x4E00 + pick(0x5200), text);
        break;
      case 9:
        if (pick(2)) {
          AppendUtf8(0x1F600 + pick(0x50), text);
          if (pick(3) == 0) {
            AppendUtf8(0x200D, text);
            AppendUtf8(0x1F32B, text);
            AppendUtf8(0xFE0F, text);
          }
        } else {
          char32_t cp;
          do {
            cp = 0x20 + pick(0x110000 - 0x20);
          } while ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0x2581);
          AppendUtf8(cp, text);
        }
        break;
    }
  }
  return text;
}

}  // namespace baton::testing_tokenizer
