// Unicode helpers for the tokenizers: strict UTF-8 decoding and encoding, the
// GPT-2 byte <-> code point mapping, and the character classes the
// pre-tokenizer split rules need (\p{L}, \p{N}, \s, \p{P}, \p{M}, case).
//
// Categories come from ICU (u_charType, u_isUWhiteSpace) with an ASCII fast
// path, so they follow the Unicode version of the system ICU (72 = Unicode 15).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace baton {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// One decoded code point and the number of input bytes it spans.
struct Utf8Char {
  char32_t code_point;  // kReplacementChar when !valid
  uint32_t n_bytes;     // 1..4; 1 for an invalid byte
  bool valid;
};

// Decodes the character starting at text[pos] (pos < text.size()). Strict
// per Unicode table 3-7: overlong forms, surrogates, values above U+10FFFF
// and truncated sequences are invalid; an invalid start consumes one byte,
// a truncated sequence consumes its valid prefix (the "maximal subpart").
Utf8Char DecodeUtf8(std::string_view text, size_t pos);

// Appends the UTF-8 encoding of `code_point` (must be <= U+10FFFF, not a
// surrogate) to `out`.
void AppendUtf8(char32_t code_point, std::string& out);

// Length in bytes of the sequence a lead byte announces: 1..4, or 0 for a
// byte that cannot start a character (continuation bytes, C0, C1, F5..FF).
int Utf8SequenceLength(uint8_t lead);

// True when text[pos..] is a proper prefix of some valid UTF-8 character,
// i.e. more bytes could still complete it (used by streaming decoding).
bool IsIncompleteUtf8Prefix(std::string_view text, size_t pos);

// True when the whole string is valid UTF-8.
bool IsValidUtf8(std::string_view text);

// Character classes as the regex engines used by the reference tokenizers
// define them.
bool IsLetter(char32_t code_point);      // \p{L}: Lu Ll Lt Lm Lo
bool IsNumber(char32_t code_point);      // \p{N}: Nd Nl No
bool IsWhitespace(char32_t code_point);  // \s: the White_Space property

// All the classes a pre-tokenizer asks about, from one category lookup.
enum UnicodeClass : uint8_t {
  kUnicodeLetter = 1,         // \p{L}
  kUnicodeNumber = 2,         // \p{N}
  kUnicodeWhitespace = 4,     // \s
  kUnicodePunctuation = 8,    // \p{P}: Pc Pd Ps Pe Pi Pf Po
  kUnicodeMark = 16,          // \p{M}: Mn Mc Me
  kUnicodeUpperOrTitle = 32,  // \p{Lu} \p{Lt}
  kUnicodeLower = 64,         // \p{Ll}
};
// Bitwise OR of the UnicodeClass values that hold for `code_point`.
uint8_t UnicodeClasses(char32_t code_point);

// GPT-2 byte-level BPE alphabet: every byte maps to a printable code point
// (printable Latin-1 bytes map to themselves, the other 68 to U+0100..U+0143
// in byte order), so any byte string becomes a string of visible characters.
char32_t ByteToCodePoint(uint8_t byte);
// Inverse mapping; -1 for code points outside the alphabet.
int CodePointToByte(char32_t code_point);

}  // namespace baton
