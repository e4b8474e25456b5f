// Hand-derived splits for the pre-tokenizers beyond gpt2 / llama-bpe / qwen2:
// the regex sequences of deepseek-llm, deepseek-coder, falcon and starcoder
// (each regex splits the pieces the previous one left; text between matches
// stays a piece) and tekken's case-following letter words. Each case shows a
// place where a kind differs from the others: digit grouping, CJK runs,
// contractions, newlines, whitespace, letter case. The random cases checked
// against Python's `regex` are in pre_tokenizer_test.cc.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/tokenizer/pre_tokenizer.h"

namespace baton {
namespace {

using Words = std::vector<std::string>;

struct KindCase {
  const char* name;  // a tokenizer.ggml.pre value
  std::string text;
  Words words;
};

class PreTokenizerSequenceSplit : public ::testing::TestWithParam<KindCase> {};

TEST_P(PreTokenizerSequenceSplit, MatchesTheRegexSequence) {
  const KindCase& c = GetParam();
  const auto pre = PreTokenizer::FromName(c.name);
  ASSERT_TRUE(pre.ok()) << pre.status();
  Words words;
  for (const std::string_view word : pre->split(c.text)) words.emplace_back(word);
  EXPECT_EQ(words, c.words) << c.name << ": " << c.text;
}

// U+6211 U+60F3 U+5728 "apple" U+5DE5 U+4F5C "1314151" U+5929 U+FF5E
const std::string kCjkMixed =
    "\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8"
    "apple\xE5\xB7\xA5\xE4\xBD\x9C"
    "1314151\xE5\xA4\xA9\xEF\xBD\x9E";

const KindCase kCases[] = {
    // ---- Digits: runs (deepseek-llm), single (deepseek-coder, starcoder,
    // tekken), ASCII triples cut from gpt2's run (falcon).
    {"deepseek-llm", "1234567", {"1234567"}},
    {"deepseek-coder", "1234567", {"1", "2", "3", "4", "5", "6", "7"}},
    {"starcoder", "1234567", {"1", "2", "3", "4", "5", "6", "7"}},
    {"tekken", "1234567", {"1", "2", "3", "4", "5", "6", "7"}},
    {"falcon", "1234567", {"123", "456", "7"}},
    // falcon: gpt2 joins the space to the number, then [0-9]{3} cuts the
    // word, leaving the space and the last two digits as gaps.
    {"falcon", " 12345", {" ", "123", "45"}},
    // falcon's triples are ASCII only: U+0663 U+0664 U+0665 stay one word.
    {"falcon", "\xD9\xA3\xD9\xA4\xD9\xA5", {"\xD9\xA3\xD9\xA4\xD9\xA5"}},
    // Applied in sequence, not as one alternation: the digits are cut off
    // first, so gpt2's " ?\p{N}+" never joins the space to them.
    {"starcoder", "costs 100 dollars", {"costs", " ", "1", "0", "0", " dollars"}},
    {"command-r", "v2.0 ", {"v", "2", ".", "0", " "}},
    {"smollm", "x1 y", {"x", "1", " y"}},

    // ---- CJK: deepseek's [U+4E00-U+9FA5 U+0800-U+4E00 U+AC00-U+D7FF]+ runs.
    // deepseek-llm: "apple" is an explicit letter run; U+FF5E is in its
    // punctuation class; the digits are one \p{N}+ run.
    {"deepseek-llm",
     kCjkMixed,
     {"\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8", "apple", "\xE5\xB7\xA5\xE4\xBD\x9C", "1314151",
      "\xE5\xA4\xA9", "\xEF\xBD\x9E"}},
    // deepseek-coder: \p{L}+ first takes the ideographs with "apple"; the CJK
    // regex then cuts "apple" back out as a gap; U+FF5E (Sm) is no \p{P}.
    {"deepseek-coder",
     kCjkMixed,
     {"\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8", "apple", "\xE5\xB7\xA5\xE4\xBD\x9C", "1", "3", "1",
      "4", "1", "5", "1", "\xE5\xA4\xA9", "\xEF\xBD\x9E"}},
    // Hangul (U+D55C U+AE00) and katakana (U+30A2) are in the CJK class;
    // U+0967 (Devanagari one, a \p{N}) is in U+0800-U+4E00, so deepseek-llm's
    // CJK regex takes it before \p{N}+ can join it to the "2".
    {"deepseek-llm",
     "\xED\x95\x9C\xEA\xB8\x80\xE3\x82\xA2",
     {"\xED\x95\x9C\xEA\xB8\x80\xE3\x82\xA2"}},
    {"deepseek-llm", "2\xE0\xA5\xA7", {"2", "\xE0\xA5\xA7"}},
    // tekken: ideographs are Lo, in both case classes: one word with the
    // Latin letters around them.
    {"tekken", "\xE4\xB8\xADword\xE4\xB8\xAD", {"\xE4\xB8\xADword\xE4\xB8\xAD"}},

    // ---- deepseek-llm's explicit letter ranges, not \p{L}: U+00D7 (x sign)
    // is in the gap between them; U+212A (Kelvin) is in.
    {"deepseek-llm", "a\xC3\x97" "b", {"a", "\xC3\x97", "b"}},
    {"deepseek-llm", "3\xE2\x84\xAA", {"3", "\xE2\x84\xAA"}},
    // A letter word is split again by the punctuation regex, whose :-~ holds
    // the ASCII letters only: U+00B5 (micro) and U+00E9 end up apart.
    {"deepseek-llm", "5\xC2\xB5m", {"5", "\xC2\xB5", "m"}},
    {"deepseek-llm", "caf\xC3\xA9s", {"caf", "\xC3\xA9", "s"}},
    // U+0628 (Arabic beh, Lo) is in no class of deepseek-llm: a gap, while
    // deepseek-coder's \s?\p{L}+ takes it with its space.
    {"deepseek-llm", "a \xD8\xA8", {"a", " \xD8\xA8"}},
    {"deepseek-coder", "a \xD8\xA8", {"a", " \xD8\xA8"}},
    // deepseek-llm's punctuation class holds U+3000..U+3002: U+3002 U+3000
    // is one run, then \s+$ splits off the trailing U+3000 (whitespace);
    // U+3000 U+3002 stays one piece (\s? then the run).
    {"deepseek-llm", "\xE3\x80\x82\xE3\x80\x80", {"\xE3\x80\x82", "\xE3\x80\x80"}},
    {"deepseek-llm", "\xE3\x80\x80\xE3\x80\x82", {"\xE3\x80\x80\xE3\x80\x82"}},
    {"deepseek-llm", "x += y;", {"x", " +=", " y", ";"}},

    // ---- Contractions: only gpt2-based kinds have them (case-sensitive);
    // tekken's prefix char lets "'" lead a letter word.
    {"deepseek-llm", "he's", {"he", "'", "s"}},
    {"deepseek-coder", "he's", {"he", "'", "s"}},
    {"starcoder", "he's HE'S", {"he", "'s", " HE", "'", "S"}},
    {"falcon", "he's", {"he", "'", "s"}},
    {"tekken", "he's HE'S", {"he", "'s", " HE", "'S"}},

    // ---- Newlines and whitespace.
    // deepseek: every \r and \n is its own piece; trailing whitespace of a
    // piece is split off by \s+$.
    {"deepseek-llm", "a\r\n\nb", {"a", "\r", "\n", "\n", "b"}},
    {"deepseek-llm", "hello \n", {"hello", " ", "\n"}},
    {"deepseek-llm", "a  b  ", {"a", " ", " b", "  "}},
    {"deepseek-coder", "def f():\n    return 1\n",
     {"def", " f", "():", "\n", "   ", " return", " ", "1", "\n"}},
    // tekken: " ?[^\s\p{L}\p{N}]+[\r\n/]*" takes slashes and newlines after
    // a symbol run.
    {"tekken", "http://x.y/\n\nz", {"http", "://", "x", ".y", "/\n\n", "z"}},
    {"tekken", "a   \n\n  b", {"a", "   \n\n", " ", " b"}},
    // falcon: punctuation runs are cut first, so a space never joins them.
    {"falcon", "x = -1;", {"x", " ", "=", " ", "-", "1", ";"}},
    {"falcon", "a  b", {"a", " ", " b"}},

    // ---- tekken: letter words follow case ([Lu Lt Lm Lo M]*[Ll Lm Lo M]+ or
    // [Lu Lt Lm Lo M]+[Ll Lm Lo M]*), so camelCase splits.
    {"tekken", "HelloWorld", {"Hello", "World"}},
    {"tekken", "CamelCaseXMLParser", {"Camel", "Case", "XMLParser"}},
    {"tekken", "iPhone ABCdef", {"i", "Phone", " ABCdef"}},
    // Non-ASCII case counts (U+00C9 is Lu): "a" then "Eb". llama.cpp's
    // lookahead rewrite treats every non-ASCII letter as both cases and would
    // give "a\xC3\x89" "b" here.
    {"tekken", "a\xC3\x89" "b", {"a", "\xC3\x89" "b"}},
    // Marks (U+0301) are in both case classes: a decomposed accent stays in
    // its word.
    {"tekken", "cafe\xCC\x81 ok", {"cafe\xCC\x81", " ok"}},
    // U+01C5 (Lt) counts as upper case.
    {"tekken", "x\xC7\x85y", {"x", "\xC7\x85y"}},

    {"tekken", "", {}},
    {"deepseek-llm", "", {}},
    {"falcon", "", {}},
};

INSTANTIATE_TEST_SUITE_P(HandDerived, PreTokenizerSequenceSplit, ::testing::ValuesIn(kCases));

}  // namespace
}  // namespace baton
