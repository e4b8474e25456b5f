#include "common/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/unicode.h"

namespace baton {
namespace {

// Per-character class bits (the UnicodeClass values); kInRange distinguishes
// "a character that is none of the classes" from "past the end" (no bits).
enum : uint8_t {
  kLetter = kUnicodeLetter,
  kNumber = kUnicodeNumber,
  kSpace = kUnicodeWhitespace,
  kPunct = kUnicodePunctuation,
  kMark = kUnicodeMark,
  kUpper = kUnicodeUpperOrTitle,
  kLower = kUnicodeLower,
  kInRange = 128,
};

// The text decoded once: code point, class bits and byte offset per char.
class CharStream {
 public:
  explicit CharStream(std::string_view text) {
    code_points_.reserve(text.size());
    flags_.reserve(text.size());
    offsets_.reserve(text.size() + 1);
    for (size_t pos = 0; pos < text.size();) {
      const Utf8Char c = DecodeUtf8(text, pos);
      code_points_.push_back(c.code_point);
      flags_.push_back(UnicodeClasses(c.code_point) | kInRange);
      offsets_.push_back(pos);
      pos += c.n_bytes;
    }
    offsets_.push_back(text.size());
  }

  size_t size() const { return code_points_.size(); }
  char32_t cp(size_t i) const { return code_points_[i]; }
  uint8_t flags(size_t i) const { return flags_[i]; }
  size_t byte_offset(size_t i) const { return offsets_[i]; }

 private:
  std::vector<char32_t> code_points_;
  std::vector<uint8_t> flags_;
  std::vector<size_t> offsets_;  // [size() + 1] byte offset of each char, then text.size()
};

// The piece [begin, end) of a CharStream that one regex splits. Reads past
// `end` see "past the end": a regex of a sequence sees each piece the previous
// one left as its whole input (llama.cpp's unicode_regex_split, Hugging Face's
// Sequence of Splits), so lookaheads and `$` stop at the piece's end.
class CharRange {
 public:
  CharRange(const CharStream& chars, size_t begin, size_t end)
      : chars_(&chars), begin_(begin), end_(end) {}

  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  // Past the end: kOutOfRange / no flags, like a regex at the end of input.
  static constexpr char32_t kOutOfRange = 0xFFFFFFFF;
  char32_t cp(size_t i) const { return i < end_ ? chars_->cp(i) : kOutOfRange; }
  uint8_t flags(size_t i) const { return i < end_ ? chars_->flags(i) : 0; }

 private:
  const CharStream* chars_;
  size_t begin_;
  size_t end_;
};

char32_t AsciiLower(char32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

// Length (2 or 3 chars) of a contraction 's 't 're 've 'm 'll 'd at `pos`, or 0.
size_t ContractionLength(const CharRange& s, size_t pos, bool case_insensitive) {
  if (s.cp(pos) != '\'') return 0;
  auto at = [&](size_t i) { return case_insensitive ? AsciiLower(s.cp(i)) : s.cp(i); };
  const char32_t next = at(pos + 1);
  if (next == 's' || next == 't' || next == 'm' || next == 'd') return 2;
  const char32_t next2 = at(pos + 2);
  if ((next == 'r' && next2 == 'e') || (next == 'v' && next2 == 'e') ||
      (next == 'l' && next2 == 'l')) {
    return 3;
  }
  return 0;
}

bool IsOther(uint8_t flags) {  // [^\s\p{L}\p{N}], and not past the end
  return (flags & kInRange) && !(flags & (kSpace | kLetter | kNumber));
}

// Number of whitespace chars starting at `pos`.
size_t WhitespaceRun(const CharRange& s, size_t pos) {
  size_t n = 0;
  while (s.flags(pos + n) & kSpace) ++n;
  return n;
}

// Appends word boundaries (char indices where a word ends) for GPT-2.
void SplitGpt2(const CharRange& s, std::vector<size_t>& ends) {
  const size_t n = s.end();
  for (size_t pos = s.begin(); pos < n;) {
    const char32_t cp = s.cp(pos);
    if (const size_t len = ContractionLength(s, pos, /*case_insensitive=*/false)) {
      pos += len;
      ends.push_back(pos);
      continue;
    }
    // " ?X+" for X in \p{L}, \p{N}, [^\s\p{L}\p{N}]: the optional space only
    // joins when the class starts right after it.
    const uint8_t first = cp == ' ' ? s.flags(pos + 1) : s.flags(pos);
    auto take_run = [&](auto in_class) {
      pos += cp == ' ';
      while (in_class(s.flags(pos))) ++pos;
      ends.push_back(pos);
    };
    if (first & kLetter) {
      take_run([](uint8_t f) { return (f & kLetter) != 0; });
      continue;
    }
    if (first & kNumber) {
      take_run([](uint8_t f) { return (f & kNumber) != 0; });
      continue;
    }
    if (IsOther(first)) {
      take_run(IsOther);
      continue;
    }
    const size_t n_space = WhitespaceRun(s, pos);
    if (n_space > 1 && pos + n_space < n) {
      // \s+(?!\S): leave the last space to join the word that follows.
      pos += n_space - 1;
    } else if (n_space > 0) {
      pos += n_space;  // \s+
    } else {
      pos += 1;  // unreachable: every char is L, N, \s or other
    }
    ends.push_back(pos);
  }
}

// End of the word `\s*[\r\n]+|\s+(?!\S)|\s+` takes at `pos` (Llama 3, Qwen2,
// tekken): after the whitespace run's last newline if it has one; otherwise
// the run less its last char when a word follows (that char joins it);
// otherwise the whole run.
size_t WhitespaceWordEnd(const CharRange& s, size_t pos) {
  const size_t n_space = WhitespaceRun(s, pos);
  size_t end_after_newline = 0;
  for (size_t i = pos; i < pos + n_space; ++i) {
    if (s.cp(i) == '\r' || s.cp(i) == '\n') end_after_newline = i + 1;
  }
  if (end_after_newline > 0) return end_after_newline;
  if (n_space > 1 && pos + n_space < s.end()) return pos + n_space - 1;
  if (n_space > 0) return pos + n_space;
  return pos + 1;  // unreachable: the caller's other alternatives took every non-space
}

// Llama 3 and Qwen2: `max_digits` is 3 or 1.
void SplitLlama3(const CharRange& s, size_t max_digits, std::vector<size_t>& ends) {
  for (size_t pos = s.begin(); pos < s.end();) {
    const char32_t cp = s.cp(pos);
    const uint8_t flags = s.flags(pos);
    if (const size_t len = ContractionLength(s, pos, /*case_insensitive=*/true)) {
      pos += len;
      ends.push_back(pos);
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (cp != '\r' && cp != '\n' && !(flags & kNumber) &&
        ((flags & kLetter) || (s.flags(pos + 1) & kLetter))) {
      ++pos;  // the optional prefix char, or the first letter
      while (s.flags(pos) & kLetter) ++pos;
      ends.push_back(pos);
      continue;
    }
    // \p{N}{1,max_digits}
    if (flags & kNumber) {
      size_t run = 0;
      while ((s.flags(pos) & kNumber) && run < max_digits) {
        ++pos;
        ++run;
      }
      ends.push_back(pos);
      continue;
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*"
    const uint8_t first = cp == ' ' ? s.flags(pos + 1) : flags;
    if (IsOther(first)) {
      pos += cp == ' ';
      while (IsOther(s.flags(pos))) ++pos;
      while (s.cp(pos) == '\r' || s.cp(pos) == '\n') ++pos;
      ends.push_back(pos);
      continue;
    }
    pos = WhitespaceWordEnd(s, pos);
    ends.push_back(pos);
  }
}

// ---- Sequences of regexes (deepseek-llm, deepseek-coder, falcon, starcoder)

// Splits one piece by one regex: each match is a piece, and so is the text
// between two matches. `Match` gives the length of the regex's match at a
// position (0: no match there); positions are tried left to right, as a regex
// search does.
template <size_t (*Match)(const CharRange&, size_t)>
void SplitByMatches(const CharRange& r, std::vector<size_t>& ends) {
  size_t gap_begin = r.begin();
  for (size_t pos = r.begin(); pos < r.end();) {
    const size_t length = Match(r, pos);
    if (length == 0) {
      ++pos;
      continue;
    }
    if (pos > gap_begin) ends.push_back(pos);
    pos += length;
    ends.push_back(pos);
    gap_begin = pos;
  }
  if (gap_begin < r.end()) ends.push_back(r.end());
}

// One regex of a sequence: appends the ends of the pieces it cuts a piece into.
using SplitStage = void (*)(const CharRange&, std::vector<size_t>&);

// Applies `stages` one after another, each to every piece the previous left.
void SplitInSequence(const CharStream& chars, std::initializer_list<SplitStage> stages,
                     std::vector<size_t>& ends) {
  ends.assign(chars.size() > 0 ? 1 : 0, chars.size());
  std::vector<size_t> next;
  for (const SplitStage stage : stages) {
    next.clear();
    size_t begin = 0;
    for (const size_t end : ends) {
      stage(CharRange(chars, begin, end), next);
      begin = end;
    }
    ends.swap(next);
  }
}

// A character class over (code point, class bits); false past the end.
using CharClass = bool (*)(char32_t cp, uint8_t flags);

// Number of chars from `pos` in `in_class`.
size_t RunLength(const CharRange& r, size_t pos, CharClass in_class) {
  size_t n = 0;
  while (pos + n < r.end() && in_class(r.cp(pos + n), r.flags(pos + n))) ++n;
  return n;
}

// `\s?X+`: the optional whitespace char joins only a run that follows it.
size_t OptionalSpaceThenRun(const CharRange& r, size_t pos, CharClass in_class) {
  if ((r.flags(pos) & kSpace) && RunLength(r, pos + 1, in_class) > 0) {
    return 1 + RunLength(r, pos + 1, in_class);
  }
  return RunLength(r, pos, in_class);
}

struct CodePointRange {
  char32_t first;
  char32_t last;
};

template <size_t N>
bool InRanges(const CodePointRange (&ranges)[N], char32_t cp) {
  const CodePointRange* after = std::upper_bound(
      ranges, ranges + N, cp, [](char32_t c, const CodePointRange& r) { return c < r.first; });
  return after != ranges && cp <= (after - 1)->last;
}

// deepseek-llm's explicit letter class (the cased letters of Latin, Greek,
// Cyrillic, Armenian, Georgian, Cherokee, Glagolitic, Coptic, Deseret, Osage,
// Old Hungarian, Warang Citi, Adlam, ...), range by range as published.
constexpr CodePointRange kDeepseekLetters[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},
    {0xD8, 0xF6},       {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},
    {0x295, 0x2AF},     {0x370, 0x373},     {0x376, 0x377},     {0x37B, 0x37D},
    {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},     {0x38C, 0x38C},
    {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},
    {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
// deepseek-llm's punctuation class [!-/:-~！-／：-～‘-‟　-。]: note that :-~
// holds the ASCII letters too, and U+3000 is also whitespace.
constexpr CodePointRange kDeepseekPunct[] = {
    {0x21, 0x2F},     {0x3A, 0x7E},     {0x2018, 0x201F},
    {0x3000, 0x3002}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
};
// [一-龥ࠀ-一가-퟿] of both DeepSeek patterns: U+0800..U+9FA5 (from Samaritan
// through Thai, Devanagari, kana, CJK) and U+AC00..U+D7FF (Hangul).
constexpr CodePointRange kDeepseekCjk[] = {{0x0800, 0x9FA5}, {0xAC00, 0xD7FF}};

bool IsDeepseekLetter(char32_t cp, uint8_t) { return InRanges(kDeepseekLetters, cp); }
bool IsDeepseekPunct(char32_t cp, uint8_t) { return InRanges(kDeepseekPunct, cp); }
bool IsDeepseekCjk(char32_t cp, uint8_t) { return InRanges(kDeepseekCjk, cp); }
bool IsLetterChar(char32_t, uint8_t flags) { return (flags & kLetter) != 0; }
bool IsNumberChar(char32_t, uint8_t flags) { return (flags & kNumber) != 0; }
bool IsPunctChar(char32_t, uint8_t flags) { return (flags & kPunct) != 0; }
// [\p{P}\$\+<=>\^~\|`]: punctuation plus the ASCII symbols (Sc, Sm, Sk).
bool IsFalconPunct(char32_t cp, uint8_t flags) {
  return (flags & kPunct) || cp == '$' || cp == '+' || cp == '<' || cp == '=' || cp == '>' ||
         cp == '^' || cp == '~' || cp == '|' || cp == '`';
}

size_t MatchNewline(const CharRange& r, size_t pos) {  // [\r\n]
  return r.cp(pos) == '\r' || r.cp(pos) == '\n';
}
size_t MatchDeepseekLetters(const CharRange& r, size_t pos) {
  return OptionalSpaceThenRun(r, pos, IsDeepseekLetter);
}
size_t MatchDeepseekPunct(const CharRange& r, size_t pos) {
  return OptionalSpaceThenRun(r, pos, IsDeepseekPunct);
}
size_t MatchDeepseekCjk(const CharRange& r, size_t pos) {
  return RunLength(r, pos, IsDeepseekCjk);
}
size_t MatchSpaceLetters(const CharRange& r, size_t pos) {  // \s?\p{L}+
  return OptionalSpaceThenRun(r, pos, IsLetterChar);
}
size_t MatchSpacePunct(const CharRange& r, size_t pos) {  // \s?\p{P}+
  return OptionalSpaceThenRun(r, pos, IsPunctChar);
}
size_t MatchNumbers(const CharRange& r, size_t pos) {  // \p{N}+
  return RunLength(r, pos, IsNumberChar);
}
size_t MatchOneNumber(const CharRange& r, size_t pos) {  // \p{N}
  return (r.flags(pos) & kNumber) ? 1 : 0;
}
size_t MatchFalconPunct(const CharRange& r, size_t pos) {
  return RunLength(r, pos, IsFalconPunct);
}
size_t MatchThreeAsciiDigits(const CharRange& r, size_t pos) {  // [0-9][0-9][0-9]
  for (size_t i = pos; i < pos + 3; ++i) {
    if (r.cp(i) < '0' || r.cp(i) > '9') return 0;
  }
  return 3;
}

// \s+$: the piece's trailing whitespace, if any, becomes a piece.
void SplitTrailingSpace(const CharRange& r, std::vector<size_t>& ends) {
  size_t trailing_begin = r.end();
  while (trailing_begin > r.begin() && (r.flags(trailing_begin - 1) & kSpace)) --trailing_begin;
  if (trailing_begin > r.begin() && trailing_begin < r.end()) ends.push_back(trailing_begin);
  ends.push_back(r.end());
}

void SplitDeepseekLlm(const CharStream& chars, std::vector<size_t>& ends) {
  SplitInSequence(chars,
                  {SplitByMatches<MatchNewline>, SplitByMatches<MatchDeepseekLetters>,
                   SplitByMatches<MatchDeepseekPunct>, SplitTrailingSpace,
                   SplitByMatches<MatchDeepseekCjk>, SplitByMatches<MatchNumbers>},
                  ends);
}

void SplitDeepseekCoder(const CharStream& chars, std::vector<size_t>& ends) {
  SplitInSequence(chars,
                  {SplitByMatches<MatchNewline>, SplitByMatches<MatchSpaceLetters>,
                   SplitByMatches<MatchSpacePunct>, SplitByMatches<MatchDeepseekCjk>,
                   SplitByMatches<MatchOneNumber>},
                  ends);
}

// ---- tekken (Mistral Nemo): one regex whose letter words follow case

// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}]: marks and
// caseless letters are in both.
bool IsTekkenUpper(char32_t, uint8_t f) { return (f & kMark) || ((f & kLetter) && !(f & kLower)); }
bool IsTekkenLower(char32_t, uint8_t f) { return (f & kMark) || ((f & kLetter) && !(f & kUpper)); }

// [^\r\n\p{L}\p{N}]: whitespace, marks, symbols, punctuation.
bool IsTekkenPrefix(const CharRange& r, size_t pos) {
  const char32_t cp = r.cp(pos);
  const uint8_t f = r.flags(pos);
  return (f & kInRange) && cp != '\r' && cp != '\n' && !(f & (kLetter | kNumber));
}

// Length of `[U]*[W]+` at `pos` (0: none). U* is greedy and gives back one
// char at a time until W+ can start: at the first non-U char, else at the
// last char of the U run that is also W.
size_t MatchUpperStarLowerPlus(const CharRange& r, size_t pos) {
  const size_t n_upper = RunLength(r, pos, IsTekkenUpper);
  for (size_t k = n_upper + 1; k-- > 0;) {
    if (const size_t n_lower = RunLength(r, pos + k, IsTekkenLower)) return k + n_lower;
  }
  return 0;
}

// Length of `[U]+[W]*` at `pos` (0: none); greedy, so never gives back.
size_t MatchUpperPlusLowerStar(const CharRange& r, size_t pos) {
  const size_t n_upper = RunLength(r, pos, IsTekkenUpper);
  return n_upper == 0 ? 0 : n_upper + RunLength(r, pos + n_upper, IsTekkenLower);
}

// The tekken regex at `pos`; its alternatives in order (the first that
// matches wins), each tried with the optional prefix char first:
//   [^\r\n\p{L}\p{N}]?[U]*[W]+ | [^\r\n\p{L}\p{N}]?[U]+[W]* | \p{N} |
//    ?[^\s\p{L}\p{N}]+[\r\n/]* | \s*[\r\n]+ | \s+(?!\S) | \s+
size_t MatchTekken(const CharRange& r, size_t pos) {
  const size_t prefix = IsTekkenPrefix(r, pos) ? 1 : 0;
  for (const auto match_word : {MatchUpperStarLowerPlus, MatchUpperPlusLowerStar}) {
    if (prefix) {
      if (const size_t len = match_word(r, pos + 1)) return 1 + len;
    }
    if (const size_t len = match_word(r, pos)) return len;
  }
  if (r.flags(pos) & kNumber) return 1;
  const size_t other_begin = pos + (r.cp(pos) == ' ' && IsOther(r.flags(pos + 1)));
  if (IsOther(r.flags(other_begin))) {
    size_t end = other_begin;
    while (IsOther(r.flags(end))) ++end;
    while (r.cp(end) == '\r' || r.cp(end) == '\n' || r.cp(end) == '/') ++end;
    return end - pos;
  }
  return WhitespaceWordEnd(r, pos) - pos;
}

}  // namespace

absl::StatusOr<PreTokenizer> PreTokenizer::FromName(std::string_view name) {
  if (name.empty() || name == "gpt2" || name == "gpt-2") {
    return PreTokenizer(PreTokenizerKind::kGpt2);
  }
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") {
    return PreTokenizer(PreTokenizerKind::kLlama3);
  }
  // The Qwen2.5-based DeepSeek-R1 distills keep Qwen2's tokenizer.
  if (name == "qwen2" || name == "deepseek-r1-qwen") return PreTokenizer(PreTokenizerKind::kQwen2);
  if (name == "deepseek-llm") return PreTokenizer(PreTokenizerKind::kDeepseekLlm);
  if (name == "deepseek-coder") return PreTokenizer(PreTokenizerKind::kDeepseekCoder);
  if (name == "falcon") return PreTokenizer(PreTokenizerKind::kFalcon);
  if (name == "starcoder" || name == "refact" || name == "smollm" || name == "command-r") {
    return PreTokenizer(PreTokenizerKind::kStarcoder);
  }
  if (name == "tekken") return PreTokenizer(PreTokenizerKind::kTekken);
  return absl::InvalidArgumentError(absl::StrCat(
      "tokenizer.ggml.pre '", std::string(name),
      "' is not supported; supported: gpt2 (or gpt-2, the default when absent), "
      "llama-bpe (or llama3, llama-v3), qwen2 (or deepseek-r1-qwen), deepseek-llm, "
      "deepseek-coder, falcon, starcoder (or refact, smollm, command-r), tekken"));
}

std::string_view PreTokenizer::name() const {
  switch (kind_) {
    case PreTokenizerKind::kGpt2: return "gpt2";
    case PreTokenizerKind::kLlama3: return "llama-bpe";
    case PreTokenizerKind::kQwen2: return "qwen2";
    case PreTokenizerKind::kDeepseekLlm: return "deepseek-llm";
    case PreTokenizerKind::kDeepseekCoder: return "deepseek-coder";
    case PreTokenizerKind::kFalcon: return "falcon";
    case PreTokenizerKind::kStarcoder: return "starcoder";
    case PreTokenizerKind::kTekken: return "tekken";
  }
  return "?";
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& words) const {
  words.clear();
  const CharStream chars(text);
  const CharRange all(chars, 0, chars.size());
  std::vector<size_t> ends;  // char index after each word, increasing
  switch (kind_) {
    case PreTokenizerKind::kGpt2: SplitGpt2(all, ends); break;
    case PreTokenizerKind::kLlama3: SplitLlama3(all, 3, ends); break;
    case PreTokenizerKind::kQwen2: SplitLlama3(all, 1, ends); break;
    case PreTokenizerKind::kDeepseekLlm: SplitDeepseekLlm(chars, ends); break;
    case PreTokenizerKind::kDeepseekCoder: SplitDeepseekCoder(chars, ends); break;
    case PreTokenizerKind::kFalcon:
      SplitInSequence(chars,
                      {SplitByMatches<MatchFalconPunct>, SplitGpt2,
                       SplitByMatches<MatchThreeAsciiDigits>},
                      ends);
      break;
    case PreTokenizerKind::kStarcoder:
      SplitInSequence(chars, {SplitByMatches<MatchOneNumber>, SplitGpt2}, ends);
      break;
    case PreTokenizerKind::kTekken: SplitByMatches<MatchTekken>(all, ends); break;
  }
  size_t begin_byte = 0;
  for (const size_t end : ends) {
    const size_t end_byte = chars.byte_offset(end);
    if (end_byte > begin_byte) words.push_back(text.substr(begin_byte, end_byte - begin_byte));
    begin_byte = end_byte;
  }
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> words;
  split(text, words);
  return words;
}

}  // namespace baton
