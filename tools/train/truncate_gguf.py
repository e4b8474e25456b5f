#!/usr/bin/python3
"""Keeps the first N layers of a llama-architecture GGUF: a layer-skip
self-draft for speculative decoding.

    /usr/bin/python3 tools/train/truncate_gguf.py IN.gguf OUT.gguf --layers 4

Layers N and up are dropped; the residual stream after layer N - 1 goes to
the final norm and the output matrix as before. The result is a different,
weaker model with the same tokenizer and embeddings: a draft model that
costs N / n_layer of the original's compute (baton-edge --draft, baton bench
decode --speculative N --draft F). Used because no independently trained
smaller model shares the bundled model's tokenizer here.
"""
import argparse
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "tools"))
import gguf_numpy_reference as ref  # noqa: E402
import widen_gguf  # noqa: E402


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--layers", type=int, required=True)
    a = ap.parse_args(argv)
    g = ref.GGUF(a.src)
    arch = g.kv["general.architecture"]
    if arch != "llama":
        sys.exit("truncate_gguf: only llama models (got %s)" % arch)
    n_layer = int(g.kv[arch + ".block_count"])
    if not 1 <= a.layers <= n_layer:
        sys.exit("truncate_gguf: --layers %d must be in [1, %d]" % (a.layers, n_layer))
    tensors = []
    for name, (_, ttype, _) in g.tensors.items():
        if name.startswith("blk.") and int(name.split(".")[1]) >= a.layers:
            continue
        if ttype not in (0, 1):
            sys.exit("truncate_gguf: tensor %s is not F32 / F16 (truncate the F16 source, then quantize)" % name)
        tensors.append((name, g.get(name).astype("<f4" if ttype == 0 else "<f2"), ttype))
    _, _, kvs = widen_gguf.read_kv_raw(g.buf)
    changed = {arch + ".block_count": (4, struct.pack("<I", a.layers)),
               "general.name": (8, widen_gguf.gguf_string(str(g.kv.get("general.name", "model")) + "-%dl" % a.layers))}
    out_kv = [(k, *changed.pop(k)) if k in changed else (k, t, r) for k, t, r in kvs]
    widen_gguf.write_gguf(a.dst, out_kv, tensors, int(g.kv.get("general.alignment", 32)))
    print("truncate_gguf: %s -> %s: layers %d -> %d, %d tensors" % (a.src, a.dst, n_layer, a.layers, len(tensors)))


if __name__ == "__main__":
    main(sys.argv[1:])
