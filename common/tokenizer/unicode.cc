#include "common/tokenizer/unicode.h"

#include <unicode/uchar.h>

#include <array>

namespace baton {
namespace {

// Valid range of the second byte for each lead byte (Unicode table 3-7);
// the third and fourth bytes are always 0x80..0xBF.
struct SecondByteRange {
  uint8_t lo;
  uint8_t hi;
};

SecondByteRange SecondRange(uint8_t lead) {
  switch (lead) {
    case 0xE0: return {0xA0, 0xBF};  // no overlong 3-byte forms
    case 0xED: return {0x80, 0x9F};  // no surrogates
    case 0xF0: return {0x90, 0xBF};  // no overlong 4-byte forms
    case 0xF4: return {0x80, 0x8F};  // nothing above U+10FFFF
    default: return {0x80, 0xBF};
  }
}

bool IsContinuation(uint8_t byte) { return (byte & 0xC0) == 0x80; }

// The 188 bytes GPT-2 keeps as themselves: '!'..'~', '¡'..'¬', '®'..'ÿ'.
bool IsSelfMappedByte(int byte) {
  return (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) ||
         (byte >= 0xAE && byte <= 0xFF);
}

struct ByteMaps {
  std::array<char32_t, 256> byte_to_cp;
  std::array<int16_t, 0x144> cp_to_byte;  // code points 0..0x143
};

ByteMaps BuildByteMaps() {
  ByteMaps maps;
  maps.cp_to_byte.fill(-1);
  char32_t next_extra = 0x100;
  for (int byte = 0; byte < 256; ++byte) {
    const char32_t cp = IsSelfMappedByte(byte) ? static_cast<char32_t>(byte) : next_extra++;
    maps.byte_to_cp[byte] = cp;
    maps.cp_to_byte[cp] = static_cast<int16_t>(byte);
  }
  return maps;
}

const ByteMaps& GetByteMaps() {
  static const ByteMaps maps = BuildByteMaps();
  return maps;
}

}  // namespace

int Utf8SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

Utf8Char DecodeUtf8(std::string_view text, size_t pos) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const uint8_t lead = bytes[pos];
  const int length = Utf8SequenceLength(lead);
  if (length == 1) return {lead, 1, true};
  if (length == 0) return {kReplacementChar, 1, false};
  const size_t available = text.size() - pos;
  const SecondByteRange second = SecondRange(lead);
  // Walk the continuation bytes; stop at the first one out of range.
  char32_t cp = lead & (0xFF >> (length + 1));
  for (int i = 1; i < length; ++i) {
    if (static_cast<size_t>(i) >= available) {
      return {kReplacementChar, static_cast<uint32_t>(i), false};
    }
    const uint8_t byte = bytes[pos + i];
    const bool in_range = i == 1 ? (byte >= second.lo && byte <= second.hi) : IsContinuation(byte);
    if (!in_range) return {kReplacementChar, static_cast<uint32_t>(i), false};
    cp = (cp << 6) | (byte & 0x3F);
  }
  return {cp, static_cast<uint32_t>(length), true};
}

bool IsIncompleteUtf8Prefix(std::string_view text, size_t pos) {
  const Utf8Char c = DecodeUtf8(text, pos);
  // Invalid only because the text ended: the prefix consumed everything left.
  return !c.valid && Utf8SequenceLength(static_cast<uint8_t>(text[pos])) > 1 &&
         pos + c.n_bytes == text.size();
}

bool IsValidUtf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = DecodeUtf8(text, pos);
    if (!c.valid) return false;
    pos += c.n_bytes;
  }
  return true;
}

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsLetter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return true;
    default:
      return false;
  }
}

bool IsNumber(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return true;
    default:
      return false;
  }
}

bool IsWhitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= '\t' && cp <= '\r');
  return u_isUWhiteSpace(static_cast<UChar32>(cp));
}

namespace {

uint8_t ClassesOfCategory(int8_t category) {
  switch (category) {
    case U_UPPERCASE_LETTER:
    case U_TITLECASE_LETTER: return kUnicodeLetter | kUnicodeUpperOrTitle;
    case U_LOWERCASE_LETTER: return kUnicodeLetter | kUnicodeLower;
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER: return kUnicodeLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER: return kUnicodeNumber;
    case U_CONNECTOR_PUNCTUATION:
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
    case U_OTHER_PUNCTUATION: return kUnicodePunctuation;
    case U_NON_SPACING_MARK:
    case U_COMBINING_SPACING_MARK:
    case U_ENCLOSING_MARK: return kUnicodeMark;
    default: return 0;
  }
}

// ASCII, computed once: the hot path of tokenizing English text and code.
std::array<uint8_t, 128> BuildAsciiClasses() {
  std::array<uint8_t, 128> classes{};
  for (char32_t cp = 0; cp < 128; ++cp) {
    classes[cp] = ClassesOfCategory(u_charType(static_cast<UChar32>(cp)));
    if (IsWhitespace(cp)) classes[cp] |= kUnicodeWhitespace;
  }
  return classes;
}

}  // namespace

uint8_t UnicodeClasses(char32_t cp) {
  if (cp < 0x80) {
    static const std::array<uint8_t, 128> ascii = BuildAsciiClasses();
    return ascii[cp];
  }
  uint8_t classes = ClassesOfCategory(u_charType(static_cast<UChar32>(cp)));
  if (u_isUWhiteSpace(static_cast<UChar32>(cp))) classes |= kUnicodeWhitespace;
  return classes;
}

char32_t ByteToCodePoint(uint8_t byte) { return GetByteMaps().byte_to_cp[byte]; }

int CodePointToByte(char32_t cp) {
  if (cp >= GetByteMaps().cp_to_byte.size()) return -1;
  return GetByteMaps().cp_to_byte[cp];
}

}  // namespace baton
