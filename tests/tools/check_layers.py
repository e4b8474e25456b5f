#!/usr/bin/env python3
"""Checks that every #include points down Baton's layers, never up.

usage: check_layers.py [--root DIR] [--layers FILE]

Rules (an include edge is a `#include` line of a .h/.cc/.cu/.cuh file):
  1. Within common/, a folder may include only itself and the folders before it
     in the layers file (default: tests/tools/layers.txt beside this script),
     the bottom-up order of common/'s folders. A common/ folder the file does
     not name is an error too, so a new folder gets its place on purpose.
  2. common/ never includes edge_decode/, cloud_prefill/ or tools/.
  3. edge_decode/ and cloud_prefill/ never include each other, nor tools/.
  4. tools/cli/ never includes cloud_prefill/ nor a CUDA header (only
     tools/bench/ may start in-process servers or use the CUDA backend).
proto/ (generated code) and third-party headers are below everything.

Exit 0 when no edge breaks a rule; else 1, with one line per offending edge:
  FILE:LINE: includes TARGET: WHY
(2 for a usage error: no such root, an unreadable layers file).
"""

import argparse
import os
import re
import sys

SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh")
# The folders the rules talk about; tests/ may include anything.
CHECKED_TOPS = ("common", "edge_decode", "cloud_prefill", "tools")
# Top-level folders a quoted include may name from the repository root.
ROOT_TOPS = CHECKED_TOPS + ("proto", "tests")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
# The CUDA toolkit's headers: runtime, driver, cuBLAS(Lt), cuRAND, cuFFT,
# cuSPARSE, cuSOLVER, NVRTC, NVML, NVTX, Thrust, CUB and libcu++.
CUDA_HEADER_RE = re.compile(
    r"^(cuda[A-Za-z0-9_]*\.h|cu(blas|rand|fft|sparse|solver)[A-Za-z0-9_]*\.h|"
    r"nvrtc\.h|nvml\.h|nvtx3?/.*|nvToolsExt\.h|thrust/.*|cub/.*|cuda/.*|"
    r"device_launch_parameters\.h|vector_types\.h|driver_types\.h)$")


def read_layers(path):
    """The common/ folders bottom-up. The file lists names in order, split by
    whitespace, newlines or '<' ("util < gguf < cpu" or one per line), with an
    optional "common/" prefix; '#' starts a comment."""
    names = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0]
            for token in re.split(r"[\s<]+", line):
                token = token.strip().strip("/")
                if token.startswith("common/"):
                    token = token[len("common/"):]
                if token:
                    if token in names:
                        raise ValueError(f"{path}: '{token}' is listed twice")
                    names.append(token)
    if not names:
        raise ValueError(f"{path}: no layers listed")
    return names


def source_files(root, tops=CHECKED_TOPS):
    """Repository-relative paths of the C++/CUDA sources under `tops`, sorted."""
    out = []
    for top in tops:
        base = os.path.join(root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.endswith(SOURCE_SUFFIXES):
                    out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return out


def includes(root, rel_path):
    """(line number, '<' or '"', include text, resolved repository path or None)
    for each #include of a file. A quoted include resolves like the compiler's
    search: next to the including file first, then from the repository root."""
    out = []
    with open(os.path.join(root, rel_path), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            kind, text = m.group(1), m.group(2).strip()
            resolved = None
            if kind == '"':
                beside = os.path.normpath(os.path.join(os.path.dirname(rel_path), text))
                if os.path.isfile(os.path.join(root, beside)):
                    resolved = beside
                elif text.split("/", 1)[0] in ROOT_TOPS:
                    resolved = os.path.normpath(text)  # e.g. proto/baton.pb.h (generated)
            out.append((number, kind, text, resolved))
    return out


def common_folder(path):
    """'kv' for common/kv/x.h (and for common/kv/sub/x.h); '' for a file
    directly in common/; None outside common/."""
    parts = path.split("/")
    if parts[0] != "common":
        return None
    return parts[1] if len(parts) > 2 else ""


def top(path):
    return path.split("/", 1)[0]


def under(path, folder):
    return path == folder or path.startswith(folder + "/")


def edge_violation(src, target, layers):
    """Why the include edge src -> target (repository paths) breaks a rule, or None."""
    src_top, dst_top = top(src), top(target)
    if src_top == "common":
        if dst_top in ("edge_decode", "cloud_prefill", "tools"):
            return f"common/ never includes {dst_top}/"
        if dst_top != "common":
            return None
        src_layer, dst_layer = common_folder(src), common_folder(target)
        if src_layer == dst_layer or src_layer not in layers or dst_layer not in layers:
            return None  # unplaced folders and files are reported once each (unplaced())
        if layers.index(dst_layer) > layers.index(src_layer):
            return (f"common/{src_layer} is below common/{dst_layer} "
                    f"({' < '.join(layers)}): a lower layer may not include a higher one")
        return None
    if src_top in ("edge_decode", "cloud_prefill"):
        other = "cloud_prefill" if src_top == "edge_decode" else "edge_decode"
        if dst_top == other:
            return f"{src_top}/ and {other}/ never include each other"
        if dst_top == "tools":
            return f"{src_top}/ never includes tools/"
        return None
    if under(src, "tools/cli") and dst_top == "cloud_prefill":
        return "tools/cli/ never includes cloud_prefill/ (only tools/bench/ may start servers or use CUDA)"
    return None


def unplaced(files, layers):
    """One line for each common/ folder holding sources that the layers file does
    not name, and for each source directly in common/ (outside every layer)."""
    out = []
    for layer in sorted({common_folder(path) for path in files} - {None} - set(layers)):
        if layer:
            out.append(f"common/{layer}/: not in the layers file; give it its place "
                       f"in the order ({' < '.join(layers)})")
    for path in files:
        if common_folder(path) == "":
            out.append(f"{path}: directly in common/, outside every layer; move it into one")
    return out


def check(root, layers):
    """(violations as 'FILE:LINE: includes X: WHY' lines, files read, edges seen)."""
    files = source_files(root)
    violations = unplaced(files, layers)
    edges = 0
    for path in files:
        for number, kind, text, resolved in includes(root, path):
            if resolved is None:  # a system or third-party header
                if under(path, "tools/cli") and CUDA_HEADER_RE.match(text):
                    violations.append(f"{path}:{number}: includes {kind}{text}{'>' if kind == '<' else kind}: "
                                      "tools/cli/ never includes a CUDA header (only tools/bench/ may use "
                                      "the CUDA backend)")
                continue
            edges += 1
            why = edge_violation(path, resolved, layers)
            if why:
                violations.append(f"{path}:{number}: includes {resolved}: {why}")
    return violations, files, edges


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description="Checks that #include edges point down Baton's layers.")
    ap.add_argument("--root", default=os.path.normpath(os.path.join(here, "..", "..")),
                    help="repository root (default: two folders above this script)")
    ap.add_argument("--layers", default=os.path.join(here, "layers.txt"),
                    help="the common/ order, bottom-up (default: layers.txt beside this script)")
    args = ap.parse_args(argv)
    if not os.path.isdir(os.path.join(args.root, "common")):
        print(f"check_layers: {args.root} has no common/ folder (see --root)", file=sys.stderr)
        return 2
    try:
        layers = read_layers(args.layers)
    except (OSError, ValueError) as e:
        print(f"check_layers: {e}", file=sys.stderr)
        return 2
    violations, files, edges = check(args.root, layers)
    for line in violations:
        print(line)
    print(f"check_layers: {len(files)} files, {edges} include edges between our own files, "
          f"{len(violations)} problem(s) (common/: {' < '.join(layers)})")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
