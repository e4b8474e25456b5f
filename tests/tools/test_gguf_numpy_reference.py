#!/usr/bin/env python3
"""Self-test for gguf_numpy_reference.py: builds tiny GGUF files with a pure-Python
writer (F32/F16/BF16/Q8_0/Q4_0 tensors), then checks decoding, causality, a naive
per-token/per-head re-implementation, RoPE-mode behaviour, the qwen3 / phi3 paths
(fused tensor order, QK-norm, LongRoPE selection) and the CLI.
Run: python3 tests/tools/test_gguf_numpy_reference.py   (exit 0 = pass)"""
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_numpy_reference as ref  # noqa: E402

F32, F16, Q4_0, Q8_0, BF16 = 0, 1, 2, 8, 30
N_LAYER, N_EMBD, N_HEAD, N_HEAD_KV, N_FF, N_VOCAB = 2, 64, 4, 2, 96, 50
HEAD_DIM = N_EMBD // N_HEAD
FAILURES = []


def check(cond, msg):
    if not cond:
        FAILURES.append(msg)
        print("FAIL: " + msg, file=sys.stderr)


# ---------------------------------------------------------------- quantizers
def quant_q8_0(x):
    """Returns (bytes, dequantized float64, per-element scale d)."""
    b = x.reshape(-1, 32).astype(np.float64)
    d16 = (np.abs(b).max(axis=1) / 127.0).astype(np.float16)
    dd = d16.astype(np.float64)[:, None]
    q = np.where(dd > 0, np.clip(np.round(b / np.where(dd > 0, dd, 1)), -127, 127), 0).astype(np.int8)
    raw = b"".join(d16[i:i + 1].astype("<f2").tobytes() + q[i].tobytes() for i in range(len(b)))
    return raw, (dd * q).reshape(-1), np.repeat(dd[:, 0], 32)


def quant_q4_0(x):
    b = x.reshape(-1, 32).astype(np.float64)
    m = b[np.arange(len(b)), np.abs(b).argmax(axis=1)]   # signed max-magnitude element
    d16 = (m / -8.0).astype(np.float16)
    dd = d16.astype(np.float64)[:, None]
    q = np.where(dd != 0, np.clip(np.round(b / np.where(dd != 0, dd, 1)) + 8, 0, 15), 8).astype(np.uint8)
    packed = (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)  # byte j: lo = elem j, hi = elem j+16
    raw = b"".join(d16[i:i + 1].astype("<f2").tobytes() + packed[i].tobytes() for i in range(len(b)))
    return raw, (dd * (q.astype(np.float64) - 8)).reshape(-1), np.repeat(np.abs(dd[:, 0]), 32)


def encode(x, ttype):
    """Returns (raw bytes, exactly-expected decoded float64 values, scale or None)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    if ttype == F32:
        a = x.astype("<f4")
        return a.tobytes(), a.astype(np.float64), None
    if ttype == F16:
        a = x.astype("<f2")
        return a.tobytes(), a.astype(np.float64), None
    if ttype == BF16:
        bits = (x.astype(np.float32).view(np.uint32) >> 16).astype("<u2")  # truncate
        return bits.tobytes(), (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64), None
    if ttype == Q8_0:
        return quant_q8_0(x)
    if ttype == Q4_0:
        return quant_q4_0(x)
    raise ValueError(ttype)


# ---------------------------------------------------------------- GGUF writer
def s_(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv_value(v):
    if isinstance(v, bool):
        return struct.pack("<IB", 7, int(v))
    if isinstance(v, int):
        return struct.pack("<II", 4, v)
    if isinstance(v, float):
        return struct.pack("<If", 6, v)
    if isinstance(v, str):
        return struct.pack("<I", 8) + s_(v)
    if isinstance(v, list):  # array of strings (tokenizer-like filler, exercises type 9)
        return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(s_(e) for e in v)
    raise TypeError(v)


def write_gguf(path, kvs, tensors, align=32):
    """tensors: list of (name, ggml dims, ggml type, raw bytes)."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs) + 1))
    out += s_("general.alignment") + kv_value(align)
    for k, v in kvs.items():
        out += s_(k) + kv_value(v)
    data, offsets = bytearray(), []
    for _, _, _, raw in tensors:
        data += b"\0" * (-len(data) % align)
        offsets.append(len(data))
        data += raw
    for (name, dims, ttype, _), off in zip(tensors, offsets):
        out += s_(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ttype, off)
    out += b"\0" * (-len(out) % align)
    with open(path, "wb") as f:
        f.write(bytes(out + data))


def build_model(path, arch, seed=0, biases=False, tied=False, rope_freqs=False, linear=None, n_layer=N_LAYER,
                window=0):
    """gemma3 (window > 0): QK-norm and post-norm weights too, norms stored as (1 + w) like llama.cpp."""
    rng = np.random.default_rng(seed)
    kvs = {"general.architecture": arch, arch + ".block_count": n_layer,
           arch + ".embedding_length": N_EMBD, arch + ".feed_forward_length": N_FF,
           arch + ".attention.head_count": N_HEAD, arch + ".attention.head_count_kv": N_HEAD_KV,
           arch + ".attention.layer_norm_rms_epsilon": 1e-5, arch + ".rope.freq_base": 10000.0,
           "tokenizer.ggml.tokens": ["t%d" % i for i in range(N_VOCAB)]}
    if window:
        kvs[arch + ".attention.sliding_window"] = window
    if linear:
        kvs[arch + ".rope.scaling.type"] = "linear"
        kvs[arch + ".rope.scaling.factor"] = float(linear)
    tensors, expected = [], {}

    def add(name, dims, ttype, scale=0.3, vals=None):
        x = rng.standard_normal(int(np.prod(dims))) * scale if vals is None else vals
        raw, exp, d = encode(x, ttype)
        tensors.append((name, dims, ttype, raw))
        expected[name] = (x, exp, d, ttype)

    ones = lambda n: 1.0 + 0.1 * rng.standard_normal(n)  # noqa: E731
    add("token_embd.weight", [N_EMBD, N_VOCAB], F16, 1.0)
    for i in range(n_layer):
        p = "blk.%d." % i
        add(p + "attn_norm.weight", [N_EMBD], F32, vals=ones(N_EMBD))
        if window:
            add(p + "attn_q_norm.weight", [HEAD_DIM], F32, vals=ones(HEAD_DIM))
            add(p + "attn_k_norm.weight", [HEAD_DIM], F32, vals=ones(HEAD_DIM))
            add(p + "post_attention_norm.weight", [N_EMBD], F32, vals=ones(N_EMBD))
            add(p + "post_ffw_norm.weight", [N_EMBD], F32, vals=ones(N_EMBD))
        add(p + "attn_q.weight", [N_EMBD, N_HEAD * HEAD_DIM], Q8_0)
        add(p + "attn_k.weight", [N_EMBD, N_HEAD_KV * HEAD_DIM], Q4_0)
        add(p + "attn_v.weight", [N_EMBD, N_HEAD_KV * HEAD_DIM], BF16)
        if biases:
            add(p + "attn_q.bias", [N_HEAD * HEAD_DIM], F32, 0.5)
            add(p + "attn_k.bias", [N_HEAD_KV * HEAD_DIM], F32, 0.5)
            add(p + "attn_v.bias", [N_HEAD_KV * HEAD_DIM], F32, 0.5)
        add(p + "attn_output.weight", [N_HEAD * HEAD_DIM, N_EMBD], F32, 0.15)
        add(p + "ffn_norm.weight", [N_EMBD], F32, vals=ones(N_EMBD))
        add(p + "ffn_gate.weight", [N_EMBD, N_FF], Q8_0)
        add(p + "ffn_up.weight", [N_EMBD, N_FF], Q4_0)
        add(p + "ffn_down.weight", [N_FF, N_EMBD], Q8_0, 0.15)
    add("output_norm.weight", [N_EMBD], F32, vals=ones(N_EMBD))
    if not tied:
        add("output.weight", [N_EMBD, N_VOCAB], Q8_0)
    if rope_freqs:
        add("rope_freqs.weight", [HEAD_DIM // 2], F32, vals=1.0 + 3.0 * rng.random(HEAD_DIM // 2))
    write_gguf(path, kvs, tensors)
    return expected


# ---------------------------------------------------------------- naive forward
def naive_forward(path, tokens):
    """Token-at-a-time with a KV cache, per-head Python loops, independent of the
    vectorized code paths in the reference (shares only the tensor decoder)."""
    g = ref.GGUF(path)
    arch = g.kv["general.architecture"]
    gemma3 = arch == "gemma3"
    n_layer = g.kv[arch + ".block_count"]
    window = g.kv.get(arch + ".attention.sliding_window", 0)
    eps = g.kv[arch + ".attention.layer_norm_rms_epsilon"]
    base = g.kv[arch + ".rope.freq_base"]
    fs = 1.0 / g.kv[arch + ".rope.scaling.factor"] if g.kv.get(arch + ".rope.scaling.type") == "linear" else 1.0
    ff = g.get("rope_freqs.weight") if g.has("rope_freqs.weight") else np.ones(HEAD_DIM // 2)
    emb = g.get("token_embd.weight")
    w_out = g.get("output.weight") if g.has("output.weight") else emb

    def norm(v, w):
        return v / np.sqrt(np.dot(v, v) / len(v) + eps) * w

    def local(il):  # gemma3: every layer but each sixth has a sliding window
        return gemma3 and il % 6 != 5

    def rot(vec, p, il):
        out = vec.copy()
        for i in range(HEAD_DIM // 2):
            if local(il):
                th = p * 10000.0 ** (-2.0 * i / HEAD_DIM)
            else:
                th = p * fs * base ** (-2.0 * i / HEAD_DIM) / ff[i]
            a, b = (i, i + HEAD_DIM // 2) if arch in ("qwen2", "gemma3") else (2 * i, 2 * i + 1)
            out[a] = vec[a] * np.cos(th) - vec[b] * np.sin(th)
            out[b] = vec[a] * np.sin(th) + vec[b] * np.cos(th)
        return out

    def head_norm(vec, il, which):  # gemma3 QK-norm; identity otherwise
        return norm(vec, g.get("blk.%d.attn_%s_norm.weight" % (il, which))) if gemma3 else vec

    def post_norm(vec, name):  # gemma3 post-norms; identity otherwise
        return norm(vec, g.get(name)) if gemma3 else vec

    def act(a):  # GeGLU's tanh GELU (gemma3) or SwiGLU's SiLU
        if gemma3:
            return 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3)))
        return a / (1 + np.exp(-a))

    cache = [([], []) for _ in range(n_layer)]
    logits = []
    for p, t in enumerate(tokens):
        x = emb[t].copy() * (np.sqrt(N_EMBD) if gemma3 else 1.0)
        for il in range(n_layer):
            pre = "blk.%d." % il
            h = norm(x, g.get(pre + "attn_norm.weight"))
            q, k, v = (g.get(pre + "attn_%s.weight" % n) @ h for n in "qkv")
            if g.has(pre + "attn_q.bias"):
                q, k, v = (z + g.get(pre + "attn_%s.bias" % n) for z, n in zip((q, k, v), "qkv"))
            ks = [rot(head_norm(k[j * HEAD_DIM:(j + 1) * HEAD_DIM], il, "k"), p, il) for j in range(N_HEAD_KV)]
            vs = [v[j * HEAD_DIM:(j + 1) * HEAD_DIM] for j in range(N_HEAD_KV)]
            cache[il][0].append(ks)
            cache[il][1].append(vs)
            seen = range(max(0, p - window + 1) if local(il) else 0, p + 1)  # keys this query sees
            out = []
            for hd in range(N_HEAD):
                qh = rot(head_norm(q[hd * HEAD_DIM:(hd + 1) * HEAD_DIM], il, "q"), p, il)
                kvh = hd // (N_HEAD // N_HEAD_KV)
                sc = np.array([np.dot(qh, cache[il][0][j][kvh]) for j in seen]) / np.sqrt(HEAD_DIM)
                w = np.exp(sc - sc.max())
                w /= w.sum()
                out.append(sum(wj * cache[il][1][j][kvh] for wj, j in zip(w, seen)))
            x = x + post_norm(g.get(pre + "attn_output.weight") @ np.concatenate(out), pre + "post_attention_norm.weight")
            h = norm(x, g.get(pre + "ffn_norm.weight"))
            a = g.get(pre + "ffn_gate.weight") @ h
            ffn = g.get(pre + "ffn_down.weight") @ (act(a) * (g.get(pre + "ffn_up.weight") @ h))
            x = x + post_norm(ffn, pre + "post_ffw_norm.weight")
        logits.append(w_out @ norm(x, g.get("output_norm.weight")))
    return np.array(logits)


# ---------------------------------------------------------------- qwen3 / phi3
def write_f32_model(path, arch, kvs, arrays):
    """arrays: name -> float64 numpy array (numpy shape = reversed ggml dims), all written F32."""
    base = {"general.architecture": arch, arch + ".block_count": N_LAYER,
            arch + ".embedding_length": N_EMBD, arch + ".feed_forward_length": N_FF,
            arch + ".attention.head_count": N_HEAD, arch + ".attention.head_count_kv": N_HEAD_KV,
            arch + ".attention.layer_norm_rms_epsilon": 1e-5, arch + ".rope.freq_base": 10000.0}
    base.update(kvs)
    tensors = [(n, list(reversed(a.shape)), F32, a.astype("<f4").tobytes()) for n, a in arrays.items()]
    write_gguf(path, base, tensors)


def check_new_archs(tmp, qwen2_path, tokens):
    """Structural checks of the qwen3 / phi3 paths against the reference's own
    qwen2 path (itself checked against the naive forward above): fused rows in
    q|k|v and gate|up order, QK-norm scale invariance, LongRoPE selection."""
    g = ref.GGUF(qwen2_path)
    # F32-exact copies of the qwen2 (no bias) tensors, so files differ only in layout.
    w = {n: g.get(n).astype(np.float32).astype(np.float64) for n in g.tensors}
    base = os.path.join(tmp, "qwen2_f32.gguf")
    write_f32_model(base, "qwen2", {}, w)
    want = ref.compute_logits(base, tokens)

    fused = {n: a for n, a in w.items() if not any(k in n for k in ("attn_q.", "attn_k.", "attn_v.", "ffn_gate.", "ffn_up."))}
    for il in range(N_LAYER):
        p = "blk.%d." % il
        fused[p + "attn_qkv.weight"] = np.concatenate([w[p + "attn_q.weight"], w[p + "attn_k.weight"], w[p + "attn_v.weight"]])
        fused[p + "ffn_up.weight"] = np.concatenate([w[p + "ffn_gate.weight"], w[p + "ffn_up.weight"]])
    phi3 = os.path.join(tmp, "phi3_fused.gguf")
    write_f32_model(phi3, "phi3", {}, fused)
    got = ref.compute_logits(phi3, tokens)
    check(np.allclose(got, want, rtol=1e-12, atol=1e-12), "phi3: fused q|k|v and gate|up == qwen2 separate tensors")

    # LongRoPE: all-ones factors and attn_factor 1 change nothing; the long set
    # is used only when context_length > original_context_length.
    half = HEAD_DIM // 2
    lr = dict(fused)
    lr["rope_factors_short.weight"] = np.ones(half)
    lr["rope_factors_long.weight"] = 1.0 + np.arange(half, dtype=np.float64)
    kv_short = {"phi3.context_length": 1024, "phi3.rope.scaling.original_context_length": 1024,
                "phi3.rope.scaling.attn_factor": 1.0}
    short_path = os.path.join(tmp, "phi3_short.gguf")
    write_f32_model(short_path, "phi3", kv_short, lr)
    check(np.allclose(ref.compute_logits(short_path, tokens), want, rtol=1e-12, atol=1e-12),
          "phi3: short set of ones with attn_factor 1 == no LongRoPE")
    long_path = os.path.join(tmp, "phi3_long.gguf")
    write_f32_model(long_path, "phi3", dict(kv_short, **{"phi3.context_length": 1025}), lr)
    lg = ref.compute_logits(long_path, tokens)
    check(np.allclose(lg[0], want[0], rtol=1e-12, atol=1e-12) and not np.allclose(lg[1:], want[1:], rtol=1e-6, atol=1e-6),
          "phi3: context 1025 > original 1024 selects the long set (differs from position 1 on)")
    m = ref.Model(ref.GGUF(long_path))
    check(np.array_equal(m.ff, lr["rope_factors_long.weight"]) and m.mscale == 1.0, "phi3: long set and stated attn_factor")
    nokey = dict(kv_short, **{"phi3.context_length": 4096})
    del nokey["phi3.rope.scaling.attn_factor"]
    nk_path = os.path.join(tmp, "phi3_computed.gguf")
    write_f32_model(nk_path, "phi3", nokey, lr)
    m = ref.Model(ref.GGUF(nk_path))
    check(abs(m.mscale - np.sqrt(1.0 + np.log(4.0) / np.log(1024.0))) < 1e-15, "phi3: attn_factor computed when absent")

    # qwen3: RMSNorm per head makes Q and K scale-invariant (up to eps); the norm
    # weights must matter, so the result differs from qwen2.
    rng = np.random.default_rng(5)
    q3 = dict(w)
    for il in range(N_LAYER):
        q3["blk.%d.attn_q_norm.weight" % il] = 1.0 + 0.3 * rng.standard_normal(HEAD_DIM)
        q3["blk.%d.attn_k_norm.weight" % il] = 1.0 + 0.3 * rng.standard_normal(HEAD_DIM)
    q3_path = os.path.join(tmp, "qwen3.gguf")
    write_f32_model(q3_path, "qwen3", {}, q3)
    a = ref.compute_logits(q3_path, tokens)
    scaled = dict(q3)
    scaled["blk.0.attn_q.weight"] = 8.0 * q3["blk.0.attn_q.weight"]
    scaled["blk.1.attn_k.weight"] = 8.0 * q3["blk.1.attn_k.weight"]
    sc_path = os.path.join(tmp, "qwen3_scaled.gguf")
    write_f32_model(sc_path, "qwen3", {}, scaled)
    b = ref.compute_logits(sc_path, tokens)
    check(np.allclose(a, b, rtol=1e-4, atol=1e-4), "qwen3: Q/K scale invariance through QK-norm (max diff %.3g)" % np.abs(a - b).max())
    check(not np.allclose(a, want, rtol=1e-3, atol=1e-3), "qwen3: QK-norm changes the logits")
    del q3["blk.1.attn_k_norm.weight"]
    write_f32_model(q3_path, "qwen3", {}, q3)
    try:
        ref.compute_logits(q3_path, tokens)
        check(False, "qwen3: a missing attn_k_norm.weight is an error")
    except ref.GGUFError as e:
        check("attn_k_norm" in str(e), "qwen3: the error names attn_k_norm (%s)" % e)


# ---------------------------------------------------------------- tests
def main():
    with tempfile.TemporaryDirectory(prefix="gguf_ref_test_") as tmp:
        return run_tests(tmp)


def run_tests(tmp):
    rng = np.random.default_rng(123)
    tokens = [int(t) for t in rng.integers(0, N_VOCAB, size=12)]
    variants = {
        "llama": dict(arch="llama"),
        "llama_nobias_tied": dict(arch="llama", tied=True),
        "llama_ropefreqs_linear": dict(arch="llama", rope_freqs=True, linear=4.0),
        "qwen2": dict(arch="qwen2", biases=True),
        "qwen2_nobias": dict(arch="qwen2"),
        # 6 layers: 0-4 sliding (window 3), 5 global with linear scaling.
        "gemma3": dict(arch="gemma3", tied=True, linear=8.0, n_layer=6, window=3),
        # 2 sliding layers of window 3: position p depends on tokens p - 4 .. p only.
        "gemma3_local": dict(arch="gemma3", tied=True, n_layer=2, window=3),
    }
    paths = {}
    for name, kw in variants.items():
        paths[name] = os.path.join(tmp, name + ".gguf")
        expected = build_model(paths[name], seed=7, **kw)
        g = ref.GGUF(paths[name])
        check(g.kv["tokenizer.ggml.tokens"][3] == "t3", "%s: string array kv parsed" % name)
        # Decoding: exact match with what the writer encoded; Q8_0 within d/2 of originals.
        for tname, (orig, exp, d, ttype) in expected.items():
            got = g.get(tname).reshape(-1)
            check(np.array_equal(got, exp), "%s: %s (type %d) decodes exactly" % (name, tname, ttype))
            if ttype == Q8_0:
                check(np.all(np.abs(got - orig) <= d / 2 * (1 + 1e-9) + 1e-300),
                      "%s: %s Q8_0 within d/2 of original" % (name, tname))
            if ttype == Q4_0:
                check(np.all(np.abs(got - orig) <= d * (1 + 1e-9)), "%s: %s Q4_0 within d" % (name, tname))
        check(g.get("blk.0.attn_q.weight").shape == (N_HEAD * HEAD_DIM, N_EMBD), "%s: numpy shape = reversed dims" % name)

        full = ref.compute_logits(paths[name], tokens)
        check(full.shape == (len(tokens), N_VOCAB) and np.all(np.isfinite(full)), "%s: shape/finite" % name)
        # Causality: prefix runs reproduce the prefix rows of the full run.
        for k in range(1, len(tokens) + 1):
            part = ref.compute_logits(paths[name], tokens[:k])
            check(np.allclose(part, full[:k], rtol=1e-11, atol=1e-11), "%s: causality k=%d" % (name, k))
        # Changing the last token must change its own logits (the check above can fail).
        alt = tokens[:-1] + [(tokens[-1] + 1) % N_VOCAB]
        alt_l = ref.compute_logits(paths[name], alt)
        check(np.allclose(alt_l[:-1], full[:-1], rtol=1e-11, atol=1e-11) and
              not np.allclose(alt_l[-1], full[-1], rtol=1e-6, atol=1e-6), "%s: last-token sensitivity" % name)
        # Independent naive per-token KV-cache implementation.
        naive = naive_forward(paths[name], tokens)
        check(np.allclose(naive, full, rtol=1e-9, atol=1e-9),
              "%s: matches naive forward (max abs diff %.3g)" % (name, np.abs(naive - full).max()))

    # RoPE: at position 0 the rotation is the identity, so NORM vs NEOX only differ from pos 1.
    la, qw = ref.compute_logits(paths["llama"], tokens), ref.compute_logits(paths["qwen2_nobias"], tokens)
    check(np.allclose(la[0], qw[0], rtol=1e-12, atol=1e-12), "rope: llama == qwen2 at position 0")
    check(not np.allclose(la[1:], qw[1:], rtol=1e-6, atol=1e-6), "rope: NORM != NEOX at positions > 0")
    rf = ref.compute_logits(paths["llama_ropefreqs_linear"], tokens)
    check(np.allclose(rf[0], la[0], rtol=1e-12, atol=1e-12) and not np.allclose(rf[1:], la[1:], rtol=1e-6, atol=1e-6),
          "rope: rope_freqs/linear scaling only affect positions > 0")

    # gemma3 sliding window, off-by-one exact: with 2 layers of window 3, token 0
    # reaches positions 0..4 (two hops of 2) and no further.
    alt = [(tokens[0] + 1) % N_VOCAB] + tokens[1:]
    base_l = ref.compute_logits(paths["gemma3_local"], tokens)
    alt_l = ref.compute_logits(paths["gemma3_local"], alt)
    check(not np.allclose(alt_l[4], base_l[4], rtol=1e-6, atol=1e-6), "gemma3 window: token 0 reaches position 4")
    check(np.allclose(alt_l[5:], base_l[5:], rtol=1e-12, atol=1e-12), "gemma3 window: token 0 does not reach 5+")
    # With a global layer (layer 5 of "gemma3") token 0 reaches every position.
    g6, g6_alt = ref.compute_logits(paths["gemma3"], tokens), ref.compute_logits(paths["gemma3"], alt)
    check(not np.allclose(g6_alt[-1], g6[-1], rtol=1e-6, atol=1e-6), "gemma3: the global layer sees token 0")
    check_new_archs(tmp, paths["qwen2_nobias"], tokens)

    # CLI: --out file and stdout, float32 LE [n_tokens, n_vocab], silent on success.
    script = os.path.join(HERE, "gguf_numpy_reference.py")
    tok_arg = ",".join(map(str, tokens))
    out_path = os.path.join(tmp, "logits.bin")
    r = subprocess.run([sys.executable, script, paths["qwen2"], "--tokens", tok_arg, "--out", out_path],
                       capture_output=True)
    check(r.returncode == 0 and r.stdout == b"" and r.stderr == b"", "cli --out: rc=%d stderr=%r" % (r.returncode, r.stderr))
    want = ref.compute_logits(paths["qwen2"], tokens).astype("<f4").tobytes()
    with open(out_path, "rb") as f:
        check(f.read() == want, "cli --out: content is float32 LE logits")
    r = subprocess.run([sys.executable, script, paths["qwen2"], "--tokens", tok_arg], capture_output=True)
    check(r.returncode == 0 and r.stdout == want and r.stderr == b"", "cli stdout: content")
    r = subprocess.run([sys.executable, script, paths["qwen2"], "--tokens", "1,%d" % N_VOCAB], capture_output=True)
    check(r.returncode != 0 and r.stdout == b"" and b"error" in r.stderr, "cli: out-of-range token is an error")

    if FAILURES:
        print("%d check(s) FAILED" % len(FAILURES), file=sys.stderr)
        return 1
    print("OK: gguf_numpy_reference self-test passed (%d variants)" % len(variants))
    return 0


if __name__ == "__main__":
    sys.exit(main())
