#!/usr/bin/env python3
"""Writes pre_tokenizer_regex_cases.txt: random strings split by the three
pre-tokenizer regexes with the Python `regex` module (pip install regex),
an engine independent of the hand-written matchers in
common/tokenizer/pre_tokenizer.cc. Read by tests/unit/pre_tokenizer_test.cc.

Line format: KIND <TAB> hex(text) <TAB> hex(word),hex(word),...
(hex of the UTF-8 bytes; KIND is gpt2, llama-bpe or qwen2).

The alphabet avoids characters whose class differs between Unicode versions
or between regex engines (U+001C..U+001F, U+180E, U+200B, U+017F), so the
file holds for the system ICU (Unicode 15) and newer.
"""
import random
import sys

import regex

PATTERNS = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}

ALPHABET = (
    list("abcxyzSTLDMREVstlrdmev'''\"  ") + list("0123456789")
    + list(".,!?-()$#") + [" ", " ", " ", "\t", "\n", "\n", "\r", "\x0b", "\x0c"]
    + ["\u00a0", "\u2003", "\u3000", "\u0085", "\u2028"]           # other \s
    + ["\u00e9", "\u00df", "\u1ead", "\u03a9", "\u044f", "\u4e2d", "\u30a2", "\ud55c"]  # L
    + ["\u00bd", "\u00b2", "\u216b", "\u0663", "\u0967"]             # N: No, No, Nl, Nd, Nd
    + ["\u0301", "\u0903", "\ufe0f", "\u200d"]                       # Mn, Mc, Mn, Cf
    + ["\U0001f600", "\U0001f999", "\u20ac", "\uff5e", "\u2581"]   # So, So, Sc, Sm, So
)


def main():
    rng = random.Random(20240611)
    lines = []
    for kind, pattern in PATTERNS.items():
        compiled = regex.compile(pattern)
        for _ in range(800):
            text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 24)))
            words = compiled.findall(text)
            assert "".join(words) == text, (kind, text)
            lines.append("\t".join([kind, text.encode().hex(),
                                    ",".join(w.encode().hex() for w in words)]))
    out = sys.argv[1] if len(sys.argv) > 1 else "pre_tokenizer_regex_cases.txt"
    with open(out, "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
