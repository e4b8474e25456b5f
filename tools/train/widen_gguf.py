#!/usr/bin/python3
"""Widens a llama-architecture GGUF with zero weights: the same function at a
larger memory footprint.

    /usr/bin/python3 tools/train/widen_gguf.py IN.gguf OUT.gguf --embd 2048 --ff 8192 \
        [--heads 64 --kv-heads 16] [--layers 16]

The embedding width grows from n to N (new dimensions zero in every tensor
that reads or writes the residual stream) and the FFN width from f to F (new
gate/up rows and down columns zero: silu(0) * 0 = 0). Attention keeps its
head size (attention.key_length is written, as n_embd / n_head no longer
holds); --heads / --kv-heads add heads after the original ones, with the
same query heads per KV head, so original query head i still reads KV head
i / group: new heads have zero Q, K, V rows and zero output columns, so
they add nothing. --layers appends layers whose weights are all zero: their
attention output and FFN down projection are zero, so the residual stream
passes through them unchanged. (With --embd 2048 --ff 8192 --heads 64
--kv-heads 16 --layers 16 the bundled model gets every matrix shape of
Llama-3.2-1B, 32-wide heads instead of 64-wide, and keeps its vocabulary.)
RMSNorm over N dimensions of which N - n are zero divides the mean square by
N instead of n: the norm weights are scaled by sqrt(n / N) and the epsilon by
n / N, so every normalized value is the original one. Quantizing the result
(baton model quantize) gives the original blocks unchanged (n, f multiples of
32) plus all-zero blocks, which the kernels still read: per token the model
moves the bytes of a model of the new shape, but computes what the original
does (up to float summation order). Used to measure speculative decoding on a
memory-bound model that quotes its prompt (the bundled model does; no larger
trained model exists here).
"""
import argparse
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "tools"))
import gguf_numpy_reference as ref  # noqa: E402

F32, F16 = 0, 1


def read_kv_raw(buf):
    """[(key, vtype, raw value bytes)] and the offset after the KV section."""
    r = ref._Reader(buf)
    assert r.take("<4s") == b"GGUF"
    version = r.take("<I")
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    out = []
    for _ in range(n_kv):
        key = r.string()
        vtype = r.take("<I")
        start = r.pos
        ref._read_value(r, vtype)
        out.append((key, vtype, bytes(buf[start:r.pos])))
    return version, n_tensors, out


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, kvs, tensors, align):
    """A GGUF v3 file: kvs [(key, vtype, raw value bytes)], tensors [(name,
    numpy array in the file's type, ggml type)]."""
    header = bytearray(b"GGUF" + struct.pack("<I", 3) + struct.pack("<Q", len(tensors)) + struct.pack("<Q", len(kvs)))
    for key, vtype, raw in kvs:
        header += gguf_string(key) + struct.pack("<I", vtype) + raw
    blobs, offset = [], 0
    for name, w, ttype in tensors:
        data = w.astype("<f4" if ttype == F32 else "<f2").tobytes()
        dims = list(reversed(w.shape))
        header += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        header += struct.pack("<I", ttype) + struct.pack("<Q", offset)
        blobs.append(data)
        offset += (len(data) + align - 1) // align * align
    with open(path, "wb") as out:
        out.write(header)
        out.write(b"\0" * ((-len(header)) % align))
        for data in blobs:
            out.write(data)
            out.write(b"\0" * ((-len(data)) % align))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--embd", type=int, required=True)
    ap.add_argument("--ff", type=int, required=True)
    ap.add_argument("--heads", type=int, default=0, help="query heads (default: the original's)")
    ap.add_argument("--kv-heads", type=int, default=0, help="KV heads (default: the original's)")
    ap.add_argument("--layers", type=int, default=0, help="layers (default: the original's)")
    a = ap.parse_args(argv)
    g = ref.GGUF(a.src)
    arch = g.kv["general.architecture"]
    if arch != "llama":
        sys.exit("widen_gguf: only llama models (got %s)" % arch)
    p = arch + "."
    n, f = int(g.kv[p + "embedding_length"]), int(g.kv[p + "feed_forward_length"])
    n_head = int(g.kv[p + "attention.head_count"])
    n_kv = int(g.kv.get(p + "attention.head_count_kv", n_head))
    n_layer = int(g.kv[p + "block_count"])
    head_dim = int(g.kv.get(p + "attention.key_length", n // n_head))
    N, F = a.embd, a.ff
    if N < n or F < f or N % 32 or F % 32:
        sys.exit("widen_gguf: --embd %d / --ff %d must be >= %d / %d and multiples of 32" % (N, F, n, f))
    H, HK, L = a.heads or n_head, a.kv_heads or n_kv, a.layers or n_layer
    if H < n_head or HK < n_kv or HK <= 0 or H % HK or H // HK != n_head // n_kv:
        sys.exit("widen_gguf: --heads %d / --kv-heads %d must be >= %d / %d with %d query heads per KV head"
                 % (H, HK, n_head, n_kv, n_head // n_kv))
    if L < n_layer:
        sys.exit("widen_gguf: --layers %d must be >= %d" % (L, n_layer))
    q, kvw = n_head * head_dim, n_kv * head_dim  # the original's Q and K / V widths
    scale = np.sqrt(n / N)
    eps = float(g.kv[p + "attention.layer_norm_rms_epsilon"])

    # Tensors as numpy arrays (numpy shape = reversed ggml dims: [out, in]).
    tensors = []
    for name, (dims, ttype, _) in g.tensors.items():
        t = g.get(name)
        if name.endswith("_norm.weight"):  # attn_norm, ffn_norm, output_norm: [n]
            w = np.zeros(N)
            w[:n] = t * scale
            tensors.append((name, w.astype("<f4"), F32))
            continue
        if name in ("token_embd.weight", "output.weight"):  # [vocab, n]
            w = np.zeros((t.shape[0], N))
            w[:, :n] = t
        elif name.endswith("attn_q.weight"):  # [q, n]
            w = np.zeros((H * head_dim, N))
            w[:q, :n] = t
        elif name.endswith(("attn_k.weight", "attn_v.weight")):  # [kv, n]
            w = np.zeros((HK * head_dim, N))
            w[:kvw, :n] = t
        elif name.endswith("attn_output.weight"):  # [n, q]
            w = np.zeros((N, H * head_dim))
            w[:n, :q] = t
        elif name.endswith(("ffn_gate.weight", "ffn_up.weight")):  # [f, n]
            w = np.zeros((F, N))
            w[:f, :n] = t
        elif name.endswith("ffn_down.weight"):  # [n, f]
            w = np.zeros((N, F))
            w[:n, :f] = t
        else:
            sys.exit("widen_gguf: tensor %s has no widening rule" % name)
        # Kept in the file's type (float64 copies of a 1B-shaped model would
        # need ~8 GB).
        tensors.append((name, w.astype("<f2" if ttype != F32 else "<f4"), F16 if ttype != F32 else F32))
    # Appended layers: layer n_layer - 1's tensors, zero (norm weights too:
    # a zero-weight norm feeds zeros to zero matrices either way).
    last = "blk.%d." % (n_layer - 1)
    template = [(name[len(last):], w.shape, ttype) for name, w, ttype in tensors if name.startswith(last)]
    for layer in range(n_layer, L):
        for suffix, shape, ttype in template:
            tensors.append(("blk.%d.%s" % (layer, suffix), np.zeros(shape, "<f2" if ttype != F32 else "<f4"), ttype))

    version, _, kvs = read_kv_raw(g.buf)
    changed = {p + "embedding_length": (4, struct.pack("<I", N)),
               p + "feed_forward_length": (4, struct.pack("<I", F)),
               p + "attention.key_length": (4, struct.pack("<I", head_dim)),
               p + "attention.head_count": (4, struct.pack("<I", H)),
               p + "attention.head_count_kv": (4, struct.pack("<I", HK)),
               p + "block_count": (4, struct.pack("<I", L)),
               p + "attention.value_length": (4, struct.pack("<I", head_dim)),
               p + "attention.layer_norm_rms_epsilon": (6, struct.pack("<f", eps * n / N)),
               "general.name": (8, gguf_string(str(g.kv.get("general.name", "model")) + "-wide%d" % N))}
    out_kv = []
    for key, vtype, raw in kvs:
        if key in changed:
            vtype, raw = changed.pop(key)
        out_kv.append((key, vtype, raw))
    out_kv += [(k, t, r) for k, (t, r) in changed.items()]
    write_gguf(a.dst, out_kv, tensors, int(g.kv.get("general.alignment", 32)))
    print("widen_gguf: %s -> %s: embedding %d -> %d, ffn %d -> %d, heads %d/%d -> %d/%d, layers %d -> %d, %d tensors"
          % (a.src, a.dst, n, N, f, F, n_head, n_kv, H, HK, n_layer, L, len(tensors)))


if __name__ == "__main__":
    main(sys.argv[1:])
