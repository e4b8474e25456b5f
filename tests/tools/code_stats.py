#!/usr/bin/env python3
"""Figures of the code's shape, for before/after notes of a redesign.

usage: code_stats.py [--root DIR] [--layers FILE] [--map FILE] [--top N]
                     [--with-tests] [--json]

Prints
  1. lines per folder: code only (.h .cc .cu .cuh .py .sh), the files directly
     in each folder, with a total per top-level folder;
  2. the N (default 15) longest C++ functions of common/, edge_decode/,
     cloud_prefill/ and tools/ (--with-tests: tests/ too): FILE:LINE, name,
     lines from the signature's first line to the closing brace. A
     brace-matching heuristic over the source with comments, strings and
     preprocessor lines blanked out, not a parser;
  3. the include edges from a lower layer to a higher one, per the layers file
     and rules of check_layers.py (--layers: default the root's
     tests/tools/layers.txt, else the one beside this script).
--map FILE counts the edges as if files sat elsewhere: lines "OLD_PREFIX NEW_PREFIX"
(e.g. "common/kv/kv_codec common/kv_codec/kv_codec"), the longest matching prefix
wins; so an old tree can be measured against a new layer order.
--json prints the same figures as one JSON object.
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402

CODE_SUFFIXES = (".h", ".cc", ".cu", ".cuh", ".py", ".sh")
CPP_SUFFIXES = (".h", ".cc", ".cu", ".cuh")
SOURCE_TOPS = ("common", "edge_decode", "cloud_prefill", "tools")
SKIPPED_DIRS = {".git", "node_modules", "__pycache__", ".ci"}


def code_files(root):
    """Repository-relative code files, skipping build folders and node_modules."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS and not
                             (rel_dir == "." and (d.startswith("build") or d.startswith("."))))
        for name in sorted(filenames):
            if name.endswith(CODE_SUFFIXES):
                out.append(os.path.normpath(os.path.join(rel_dir, name)))
    return out


def count_lines(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def lines_per_folder(root, files):
    """[{folder, files, lines}] per folder (its own files only), sorted, and
    {top-level folder: lines} totals ('.' for the root's own files)."""
    folders, totals = {}, {}
    for path in files:
        n = count_lines(os.path.join(root, path))
        folder = os.path.dirname(path) or "."
        entry = folders.setdefault(folder, {"folder": folder, "files": 0, "lines": 0})
        entry["files"] += 1
        entry["lines"] += n
        top = path.split("/", 1)[0] if "/" in path else "."
        totals[top] = totals.get(top, 0) + n
    return [folders[k] for k in sorted(folders)], dict(sorted(totals.items()))


# --- C++ functions ---------------------------------------------------------

RAW_STRING_RE = re.compile(r'R"([^()\\ ]{0,16})\(')


def blank_out(text):
    """The text with comments, string and character literals and preprocessor
    lines replaced by spaces (newlines kept), so braces and parentheses left
    are the code's own."""
    out = list(text)
    i, n = 0, len(text)
    at_line_start = True

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if at_line_start and c in " \t":
            i += 1
            continue
        if at_line_start and c == "#":  # a preprocessor line, with its continuations
            j = i
            while j < n and not (text[j] == "\n" and text[j - 1] != "\\"):
                j += 1
            blank(i, j)
            i = j
            continue
        at_line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == "R" and RAW_STRING_RE.match(text, i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = RAW_STRING_RE.match(text, i)
            end = text.find(")" + m.group(1) + '"', m.end())
            j = n if end < 0 else end + len(m.group(1)) + 2
            blank(i + 2, j - 1)
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                i += 1  # a digit separator (1'000'000)
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


SCOPE_RE = re.compile(r'^(?:(?:inline\s+)?namespace\b|extern\s*"[^"]*"\s*$|(?:typedef\s+)?(?:class|struct|union|enum)\b)')
TEMPLATE_RE = re.compile(r"^template\s*<")
QUALIFIERS_RE = re.compile(r"\)\s*(?:const|noexcept(?:\s*\([^)]*\))?|override|final|mutable|volatile|&&?|"
                           r"->\s*[\w:<>,\s*&]+|\s)*$")
LAUNCH_BOUNDS_RE = re.compile(r"__launch_bounds__\s*\([^)]*\)")
CONTROL_RE = re.compile(r"^(?:if|for|while|switch|catch|do|else|return|try)\b")


def strip_template_prefix(head):
    while TEMPLATE_RE.match(head):
        depth, k = 0, head.index("<")
        for k in range(head.index("<"), len(head)):
            if head[k] == "<":
                depth += 1
            elif head[k] == ">":
                depth -= 1
                if depth == 0:
                    break
        head = head[k + 1:].lstrip()
    return head


def top_level_paren(head):
    """Index of the first '(' outside template brackets, or -1."""
    depth = 0
    for k, c in enumerate(head):
        if c == "<":
            depth += 1
        elif c == ">" and depth > 0:
            depth -= 1
        elif c == "(" and (depth == 0 or head[:k].rstrip().endswith("operator")):
            return k
    return -1


def function_name(head):
    """The qualified name before the parameter list: 'GenerateTurn::run',
    'operator==', or a test macro with its arguments, 'TEST_F(Suite, Name)'."""
    head = " ".join(strip_template_prefix(head).split())
    head = LAUNCH_BOUNDS_RE.sub(" ", head)  # CUDA: __global__ void __launch_bounds__(N) kernel(...)
    k = top_level_paren(head)
    if k < 0:
        return None
    before = head[:k].rstrip()
    m = re.search(r"((?:[\w~]+(?:<[^()<>]*(?:<[^()<>]*>[^()<>]*)*>)?::)*"
                  r"(?:operator\s*(?:\(\)|[^\w\s(]+|\w[\w\s]*)|[~\w]+(?:<[^()<>]*>)?))$", before)
    if not m:
        return None
    name = m.group(1)
    if re.fullmatch(r"[A-Z][A-Z0-9_]*", name):  # TEST, TEST_F, TEST_P, ...: the arguments name it
        close = head.find(")", k)
        return head[:close + 1] if close > 0 else name
    return name


def is_function_head(head):
    body = strip_template_prefix(head)
    if not body or CONTROL_RE.match(body) or SCOPE_RE.match(body):
        return False
    k = top_level_paren(body)
    if k < 0:
        return False
    if re.search(r"(?<![=!<>])=(?!=)", body[:k]) and "operator" not in body[:k]:
        return False  # a variable initialised from a call, or a lambda bound to a name
    return bool(QUALIFIERS_RE.search(body)) or bool(re.search(r"\)\s*:\s*\w", body))


def stack_in_scope(stack):
    """True at namespace or class scope (where a constructor can be defined)."""
    return all(entry[0] in ("scope", "init") for entry in stack)


def functions(text):
    """[(first line, last line, name, code lines)] of the function bodies of a
    C++ file; code lines: those left with code once comments are blanked."""
    code = blank_out(text)
    code_lines = [False] + [bool(line.strip()) for line in code.split("\n")]  # 1-based
    line_of = []
    line = 1
    for c in code:
        line_of.append(line)
        if c == "\n":
            line += 1
    out = []
    # stack entries: ("scope", class name or ""), ("fn", start, name), ("other",)
    stack = []
    boundary = 0  # where the current declaration's text starts
    fn_depth = 0
    parens = 0  # open parentheses outside function bodies
    for i, c in enumerate(code):
        if fn_depth:
            if c == "{":
                fn_depth += 1
            elif c == "}":
                fn_depth -= 1
                if fn_depth == 0:
                    _, start, name = stack.pop()
                    out.append((start, line_of[i], name, sum(1 for k in range(start, line_of[i] + 1) if code_lines[k])))
                    boundary = i + 1
            continue
        if c == "(":
            parens += 1
        elif c == ")":
            parens = max(0, parens - 1)
        elif parens:
            # Braces inside a call's arguments at namespace scope (a macro's
            # aggregates and lambdas, INSTANTIATE_TEST_SUITE_P) are expressions.
            if c == "{":
                stack.append(("init",))
            elif c == "}" and stack:
                stack.pop()
        elif c == ";":
            boundary = i + 1
        elif c == "{":
            raw = code[boundary:i]
            head = " ".join(raw.split())
            lead = len(raw) - len(raw.lstrip())
            if re.search(r"\)\s*:\s*\w", head) and re.search(r"[\w>]\s*$", head) and stack_in_scope(stack):
                stack.append(("init",))  # a member's brace initialiser in a constructor's list
            elif is_function_head(LAUNCH_BOUNDS_RE.sub(" ", head)):
                name = function_name(head) or "?"
                classes = [entry[1] for entry in stack if entry[0] == "scope" and entry[1]]
                if classes and "::" not in name and not name.startswith("TEST"):
                    name = "::".join(classes + [name])
                stack.append(("fn", line_of[boundary + lead], name))
                fn_depth = 1
            elif SCOPE_RE.match(strip_template_prefix(head)):
                m = re.match(r"(?:typedef\s+)?(?:class|struct|union)\s+(?:\w+\s+)*?(\w+)\s*(?:final\b|:|$)",
                             strip_template_prefix(head))
                stack.append(("scope", m.group(1) if m else ""))
                boundary = i + 1
            else:
                stack.append(("other",))
                boundary = i + 1
        elif c == "}":
            if stack:
                kind = stack.pop()[0]
                if kind != "init":
                    boundary = i + 1
            else:
                boundary = i + 1
    return out


def longest_functions(root, with_tests, top):
    tops = SOURCE_TOPS + (("tests",) if with_tests else ())
    found = []
    for path in check_layers.source_files(root, tops):
        if not path.endswith(CPP_SUFFIXES):
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for start, end, name, code in functions(text):
            found.append({"file": path, "line": start, "name": name, "lines": end - start + 1, "code_lines": code})
    found.sort(key=lambda f: (-f["lines"], f["file"], f["line"]))
    return found[:top]


# --- include edges ---------------------------------------------------------

def read_map(path):
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if len(line) == 2:
                pairs.append((line[0], line[1]))
            elif line:
                raise ValueError(f"{path}: expected 'OLD_PREFIX NEW_PREFIX', got {' '.join(line)!r}")
    return sorted(pairs, key=lambda p: -len(p[0]))


def remap(path, pairs):
    for old, new in pairs:
        if path.startswith(old):
            return new + path[len(old):]
    return path


def upward_edges(root, layers, pairs):
    """(upward edges as {file, line, target, why}, edges between our own files)."""
    edges, upward = 0, []
    for path in check_layers.source_files(root):
        src = remap(path, pairs)
        for number, kind, text, resolved in check_layers.includes(root, path):
            if resolved is None:
                continue
            edges += 1
            dst = remap(resolved, pairs)
            why = check_layers.edge_violation(src, dst, layers)
            if why:
                upward.append({"file": path, "line": number, "target": resolved, "why": why})
    return upward, edges


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description="Lines per folder, longest functions, upward include edges.")
    ap.add_argument("--root", default=os.path.normpath(os.path.join(here, "..", "..")))
    ap.add_argument("--layers", help="the common/ order (default: ROOT/tests/tools/layers.txt, else beside this script)")
    ap.add_argument("--map", help="OLD_PREFIX NEW_PREFIX lines: count edges as if files sat at the new paths")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--with-tests", action="store_true", help="tests/ too in the longest functions")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    root = os.path.abspath(args.root)
    layers_path = args.layers or next(p for p in (os.path.join(root, "tests", "tools", "layers.txt"),
                                                  os.path.join(here, "layers.txt")) if os.path.isfile(p))
    layers = check_layers.read_layers(layers_path)
    pairs = read_map(args.map) if args.map else []

    files = code_files(root)
    folders, totals = lines_per_folder(root, files)
    longest = longest_functions(root, args.with_tests, args.top)
    upward, edges = upward_edges(root, layers, pairs)
    report = {
        "root": root,
        "code_suffixes": list(CODE_SUFFIXES),
        "lines_per_folder": folders,
        "lines_per_top_folder": totals,
        "lines_total": sum(totals.values()),
        "longest_functions": longest,
        "layers": {"file": layers_path, "order": layers, "map": args.map,
                   "include_edges": edges, "upward_edges": len(upward), "edges": upward},
    }
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
        return 0

    print(f"== lines per folder (code: {' '.join(CODE_SUFFIXES)}) in {root}")
    print(f"{'folder':44} {'files':>5} {'lines':>7}")
    for entry in folders:
        print(f"{entry['folder']:44} {entry['files']:5d} {entry['lines']:7d}")
    print("-- per top-level folder")
    for top, n in totals.items():
        print(f"{top:44} {'':5} {n:7d}")
    print(f"{'total':44} {len(files):5d} {report['lines_total']:7d}")
    scope = "common/ edge_decode/ cloud_prefill/ tools/" + (" tests/" if args.with_tests else "")
    print(f"\n== the {args.top} longest C++ functions ({scope})")
    print("lines: signature to closing brace; code: those lines less blank and comment-only ones")
    print(f"{'lines':>5} {'code':>5}  file:line  name")
    for f in longest:
        print(f"{f['lines']:5d} {f['code_lines']:5d}  {f['file']}:{f['line']}  {f['name']}")
    print(f"\n== include edges from a lower layer to a higher one: {len(upward)} "
          f"(of {edges} between our own files; common/: {' < '.join(layers)}"
          f"{'; paths mapped by ' + args.map if args.map else ''})")
    for e in upward:
        print(f"{e['file']}:{e['line']}: includes {e['target']}: {e['why']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
