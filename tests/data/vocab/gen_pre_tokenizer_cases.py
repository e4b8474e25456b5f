#!/usr/bin/env python3
"""Writes pre_tokenizer_regex_cases.txt: random strings split by the
pre-tokenizer regexes with the Python `regex` module (Debian: apt-get install
python3-regex), an engine independent of the hand-written matchers in
common/tokenizer/pre_tokenizer.cc. Read by tests/unit/common/tokenizer/pre_tokenizer_test.cc.

Line format: KIND <TAB> hex(text) <TAB> hex(word),hex(word),...
(hex of the UTF-8 bytes; KIND is the canonical name PreTokenizer::name()
gives: gpt2, llama-bpe, qwen2, deepseek-llm, deepseek-coder, falcon,
starcoder, tekken).

A kind is a sequence of regexes applied the way llama.cpp's
unicode_regex_split and Hugging Face's Sequence of Split(behavior=Isolated)
apply them: each regex splits every piece the previous one left, on its own
(a piece's end is the end of the input for `$` and lookaheads), and the text
between two matches stays a piece of its own.

The patterns are the published ones (the models' tokenizer.json, as listed
per LLAMA_VOCAB_PRE_TYPE in llama.cpp's llama-vocab.cpp). Where llama.cpp
rewrote a pattern for std::regex the original is used:
- the GPT-2 regex of the falcon and starcoder sequences ends in `|\\s+` here
  (llama.cpp drops it; the two split alike, since `\\s+(?!\\S)` fails only on
  one whitespace char before a non-space, which is then a gap of its own);
- tekken keeps its \\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M} / \\p{Ll}\\p{Lm}\\p{Lo}\\p{M}
  classes (llama.cpp approximates them with lookaheads that treat every
  non-ASCII letter as both cases and marks as no letter).

The alphabet avoids characters whose class differs between Unicode versions
or between regex engines (U+001C..U+001F, U+180E, U+200B, U+017F, and
characters assigned or recategorised after Unicode 12), so the file holds
for the system ICU (Unicode 15) and newer.
"""
import random
import sys

import regex

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# DeepSeek's explicit letter ranges (Latin, Greek, Cyrillic, Armenian, Georgian,
# Cherokee, ... cased letters), written as escapes: several have lookalikes.
DEEPSEEK_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
    "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a"
    "\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556"
    "\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b"
    "\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d"
    "\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4"
    "\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128"
    "\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184"
    "\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b"
    "\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17"
    "\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943")
DEEPSEEK_PUNCT = "!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002"
CJK_HANGUL_CLASS = "\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff"
CJK_HANGUL = "[" + CJK_HANGUL_CLASS + "]+"

PATTERNS = {
    "gpt2": [GPT2],
    "llama-bpe": [r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "qwen2": [r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    # `$` also matches before a final "\n" in Python, never in std::regex or
    # Rust; no piece reaching it holds a "\n" (the first regex isolates them).
    "deepseek-llm": [r"[\r\n]",
                     r"\s?[" + DEEPSEEK_LETTERS + r"]+",
                     r"\s?[" + DEEPSEEK_PUNCT + r"]+",
                     r"\s+$",
                     CJK_HANGUL,
                     r"\p{N}+"],
    "deepseek-coder": [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK_HANGUL, r"\p{N}"],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
    # starcoder, refact, smollm and command-r: single digits, then GPT-2.
    "starcoder": [r"\p{N}", GPT2],
    "tekken": [r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
               r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
               r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
}

ALPHABET = (
    list("abcxyzSTLDMREVstlrdmev'''\"  ") + list("0123456789") + list("0123456789")
    + list(".,!?-()$#/+<=>^~|`_@*;") + [" ", " ", " ", "\t", "\n", "\n", "\r", "\x0b", "\x0c"]
    + ["\u00a0", "\u2003", "\u3000", "\u0085", "\u2028"]           # other \s
    + ["\u00e9", "\u00df", "\u1ead", "\u03a9", "\u044f", "\u4e2d", "\u30a2", "\ud55c"]  # L
    + ["\u00c9", "\u01c5", "\u02b0", "\u02bc", "\u00b5", "\u1f7d", "\u03ce", "\u212a",
       "\uff21", "\uff5a", "\u0628", "\u0e01", "\u0800", "\u4e00", "\u9fa5", "\u9fa6",
       "\uac00", "\u3042", "\U00010400", "\U0001e900"]             # Lu Lt Lm Lm Ll ... Lo
    + ["\u00bd", "\u00b2", "\u216b", "\u0663", "\u0967", "\uff11"]   # N: No No Nl Nd Nd Nd
    + ["\u0301", "\u0903", "\ufe0f", "\u200d", "\u20dd"]             # Mn Mc Mn Cf Me
    + ["\U0001f600", "\U0001f999", "\u20ac", "\uff5e", "\u2581", "\u00d7"]  # So So Sc Sm So Sm
    + ["\u3001", "\u3002", "\uff01", "\u2018", "\u201c", "\u2013", "\u2026", "\u00bf",
       "\u00ab", "\u00a7"]                                            # P
)


def split_in_sequence(compiled_patterns, text):
    """llama.cpp's unicode_regex_split: matches and gaps of each piece."""
    pieces = [text]
    for compiled in compiled_patterns:
        next_pieces = []
        for piece in pieces:
            at = 0
            for match in compiled.finditer(piece):
                assert match.end() > match.start(), (compiled.pattern, piece)
                if match.start() > at:
                    next_pieces.append(piece[at:match.start()])
                next_pieces.append(match.group())
                at = match.end()
            if at < len(piece):
                next_pieces.append(piece[at:])
        pieces = next_pieces
    return pieces


def class_ranges(char_class):
    """[(first, last)] of a regex character class body like "A-Za-z\u00b5"."""
    ranges, i = [], 0
    while i < len(char_class):
        if i + 2 < len(char_class) and char_class[i + 1] == "-":
            ranges.append((ord(char_class[i]), ord(char_class[i + 2])))
            i += 3
        else:
            ranges.append((ord(char_class[i]), ord(char_class[i])))
            i += 1
    return ranges


def deepseek_boundary_texts():
    """One text per range of deepseek-llm's explicit classes: the code points
    just outside and at both ends, space-separated, so the split shows which
    of them the class holds."""
    texts = []
    for char_class in (DEEPSEEK_LETTERS, DEEPSEEK_PUNCT, CJK_HANGUL_CLASS):
        for first, last in class_ranges(char_class):
            points = [c for c in (first - 1, first, last, last + 1)
                      if 0x20 <= c <= 0x10FFFF and not 0xD800 <= c <= 0xDFFF]
            texts.append(" ".join(chr(c) for c in points))
    return texts


def case_line(kind, compiled, text):
    words = split_in_sequence(compiled, text)
    assert "".join(words) == text, (kind, text)
    return "\t".join([kind, text.encode().hex(), ",".join(w.encode().hex() for w in words)])


def main():
    rng = random.Random(20240611)
    lines = []
    for kind, patterns in PATTERNS.items():
        compiled = [regex.compile(p) for p in patterns]
        for _ in range(800):
            text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 24)))
            lines.append(case_line(kind, compiled, text))
        if kind == "deepseek-llm":
            lines += [case_line(kind, compiled, text) for text in deepseek_boundary_texts()]
    out = sys.argv[1] if len(sys.argv) > 1 else "pre_tokenizer_regex_cases.txt"
    with open(out, "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
