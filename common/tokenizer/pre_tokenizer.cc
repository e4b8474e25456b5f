#include "common/tokenizer/pre_tokenizer.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/unicode.h"

namespace baton {
namespace {

// Per-character class bits; kInRange distinguishes "a character that is none
// of L/N/\s" from "past the end" (no bits at all).
enum : uint8_t {
  kInRange = 1,
  kLetter = 2,
  kNumber = 4,
  kSpace = 8,
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
      uint8_t flags = kInRange;
      if (IsLetter(c.code_point)) flags |= kLetter;
      if (IsNumber(c.code_point)) flags |= kNumber;
      if (IsWhitespace(c.code_point)) flags |= kSpace;
      code_points_.push_back(c.code_point);
      flags_.push_back(flags);
      offsets_.push_back(pos);
      pos += c.n_bytes;
    }
    offsets_.push_back(text.size());
  }

  size_t size() const { return code_points_.size(); }
  // Past the end: kOutOfRange / no flags, like a regex at the end of input.
  static constexpr char32_t kOutOfRange = 0xFFFFFFFF;
  char32_t cp(size_t i) const { return i < size() ? code_points_[i] : kOutOfRange; }
  uint8_t flags(size_t i) const { return i < size() ? flags_[i] : 0; }
  size_t byte_offset(size_t i) const { return offsets_[i]; }

 private:
  std::vector<char32_t> code_points_;
  std::vector<uint8_t> flags_;
  std::vector<size_t> offsets_;  // [size() + 1] byte offset of each char, then text.size()
};

char32_t AsciiLower(char32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

// Length (2 or 3 chars) of a contraction 's 't 're 've 'm 'll 'd at `pos`, or 0.
size_t ContractionLength(const CharStream& s, size_t pos, bool case_insensitive) {
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
size_t WhitespaceRun(const CharStream& s, size_t pos) {
  size_t n = 0;
  while (s.flags(pos + n) & kSpace) ++n;
  return n;
}

// Appends word boundaries (char indices where a word ends) for GPT-2.
void SplitGpt2(const CharStream& s, std::vector<size_t>& ends) {
  const size_t n = s.size();
  for (size_t pos = 0; pos < n;) {
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

// Llama 3 and Qwen2: `max_digits` is 3 or 1.
void SplitLlama3(const CharStream& s, size_t max_digits, std::vector<size_t>& ends) {
  const size_t n = s.size();
  for (size_t pos = 0; pos < n;) {
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
    // Whitespace: \s*[\r\n]+ ends after the run's last newline; otherwise
    // \s+(?!\S) leaves one space for the next word; otherwise \s+.
    const size_t n_space = WhitespaceRun(s, pos);
    size_t end_after_newline = 0;
    for (size_t i = pos; i < pos + n_space; ++i) {
      if (s.cp(i) == '\r' || s.cp(i) == '\n') end_after_newline = i + 1;
    }
    if (end_after_newline > 0) {
      pos = end_after_newline;
    } else if (n_space > 1 && pos + n_space < n) {
      pos += n_space - 1;
    } else if (n_space > 0) {
      pos += n_space;
    } else {
      pos += 1;  // unreachable, as in SplitGpt2
    }
    ends.push_back(pos);
  }
}

}  // namespace

absl::StatusOr<PreTokenizer> PreTokenizer::FromName(std::string_view name) {
  if (name.empty() || name == "gpt2" || name == "gpt-2") {
    return PreTokenizer(PreTokenizerKind::kGpt2);
  }
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") {
    return PreTokenizer(PreTokenizerKind::kLlama3);
  }
  if (name == "qwen2") return PreTokenizer(PreTokenizerKind::kQwen2);
  return absl::InvalidArgumentError(absl::StrCat(
      "tokenizer.ggml.pre '", std::string(name),
      "' is not supported; supported: gpt2 (or gpt-2, the default when absent), "
      "llama-bpe (or llama3, llama-v3), qwen2"));
}

std::string_view PreTokenizer::name() const {
  switch (kind_) {
    case PreTokenizerKind::kGpt2: return "gpt2";
    case PreTokenizerKind::kLlama3: return "llama-bpe";
    case PreTokenizerKind::kQwen2: return "qwen2";
  }
  return "?";
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& words) const {
  words.clear();
  const CharStream chars(text);
  std::vector<size_t> ends;  // char index after each word, increasing
  switch (kind_) {
    case PreTokenizerKind::kGpt2: SplitGpt2(chars, ends); break;
    case PreTokenizerKind::kLlama3: SplitLlama3(chars, 3, ends); break;
    case PreTokenizerKind::kQwen2: SplitLlama3(chars, 1, ends); break;
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
