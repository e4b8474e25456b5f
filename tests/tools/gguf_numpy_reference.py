#!/usr/bin/env python3
"""Independent float64 NumPy reference forward pass for small llama/qwen2/qwen3/phi3/gemma3 GGUF models.

Usage: gguf_numpy_reference.py MODEL.gguf --tokens 1,5,9,2 [--out logits.bin]

Writes the logits of EVERY input position as little-endian float32, shape
[n_tokens, n_vocab] row-major, to --out (default: binary stdout). Prints
nothing except errors (stderr, exit status 1). Deliberately shares no code
with the C++ engine: GGUF is parsed here with `struct`, math follows
llama.cpp semantics and is done entirely in float64.

Architectures: llama (NORM RoPE), qwen2 (NEOX, QKV biases), qwen3 (NEOX,
per-head RMSNorm of Q and K before RoPE), phi3 (NEOX, fused attn_qkv and
gate|up in ffn_up, partial rotary, LongRoPE: long factors when the trained
context_length exceeds rope.scaling.original_context_length, else short;
cos and sin times rope.scaling.attn_factor, or sqrt(1 + ln(s)/ln(orig)) with
s = context_length / orig when the key is absent), gemma3 (below).

gemma3 (llama.cpp's src/models/gemma3.cpp and its GEMMA3 hparams): embeddings
times sqrt(n_embd); per-head RMSNorm of Q and K before NEOX RoPE; layer il is
sliding-window (a query at p sees keys p - W < j <= p, W =
gemma3.attention.sliding_window) unless il % 6 == 5; sliding layers rotate
with base 10000 unscaled, global layers with gemma3.rope.freq_base and the
linear scaling; attention scale 1/sqrt(head_dim) (27B, 62 layers:
1/sqrt(n_embd / n_head)); post_attention_norm / post_ffw_norm on each block
output before the residual add; GeGLU with tanh GELU; tied output, no logit
soft-capping. NOTE: Gemma's RMSNorm multiplies by (1 + w); llama.cpp's
converter stores (1 + w) in the GGUF, so every norm weight here is applied as
stored, like llama's (the GGUF file is the contract).
"""
import os
import struct
import sys

try:
    import numpy as np
except ImportError:  # e.g. a pyenv python3 first on PATH; Debian's has python3-numpy
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_BF16 = 0, 1, 2, 8, 30
QK = 32  # block size of Q4_0 / Q8_0


class GGUFError(Exception):
    pass


class _Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, fmt):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise GGUFError("truncated GGUF file at byte %d" % self.pos)
        vals = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return vals[0] if len(vals) == 1 else vals

    def string(self):
        n = self.take("<Q")
        if self.pos + n > len(self.buf):
            raise GGUFError("truncated string at byte %d" % self.pos)
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s


_SCALAR_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
               7: "<B", 10: "<Q", 11: "<q", 12: "<d"}


def _read_value(r, vtype):
    if vtype in _SCALAR_FMT:
        v = r.take(_SCALAR_FMT[vtype])
        return bool(v) if vtype == 7 else v
    if vtype == 8:
        return r.string()
    if vtype == 9:
        etype, count = r.take("<I"), r.take("<Q")
        return [_read_value(r, etype) for _ in range(count)]
    raise GGUFError("unknown GGUF value type %d" % vtype)


def _decode(raw, ggml_type, n):
    """Decode n elements of the given ggml type from raw bytes into float64."""
    if ggml_type == GGML_F32:
        return np.frombuffer(raw, dtype="<f4", count=n).astype(np.float64)
    if ggml_type == GGML_F16:
        return np.frombuffer(raw, dtype="<f2", count=n).astype(np.float64)
    if ggml_type == GGML_BF16:
        bits = np.frombuffer(raw, dtype="<u2", count=n).astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64)
    if ggml_type == GGML_Q8_0:
        nb = n // QK
        blk = np.frombuffer(raw, dtype=np.uint8, count=nb * 34).reshape(nb, 34)
        d = blk[:, :2].copy().view("<f2").astype(np.float64)          # (nb, 1)
        q = blk[:, 2:].copy().view(np.int8).astype(np.float64)        # (nb, 32)
        return (d * q).reshape(n)
    if ggml_type == GGML_Q4_0:
        nb = n // QK
        blk = np.frombuffer(raw, dtype=np.uint8, count=nb * 18).reshape(nb, 18)
        d = blk[:, :2].copy().view("<f2").astype(np.float64)          # (nb, 1)
        qs = blk[:, 2:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float64) - 8.0
        return (d * q).reshape(n)
    raise GGUFError("unsupported ggml tensor type %d" % ggml_type)


def _nbytes(ggml_type, n):
    if ggml_type == GGML_F32:
        return 4 * n
    if ggml_type in (GGML_F16, GGML_BF16):
        return 2 * n
    if ggml_type in (GGML_Q8_0, GGML_Q4_0):
        if n % QK:
            raise GGUFError("quantized tensor size %d not a multiple of %d" % (n, QK))
        return (n // QK) * (34 if ggml_type == GGML_Q8_0 else 18)
    raise GGUFError("unsupported ggml tensor type %d" % ggml_type)


class GGUF:
    """Parsed GGUF: .kv (dict), .tensors (name -> (dims, type, absolute offset))."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        r = _Reader(self.buf)
        if r.take("<4s") != b"GGUF":
            raise GGUFError("bad magic (not a GGUF file): %s" % path)
        self.version = r.take("<I")
        if self.version not in (2, 3):
            raise GGUFError("unsupported GGUF version %d" % self.version)
        n_tensors, n_kv = r.take("<Q"), r.take("<Q")
        self.kv = {}
        for _ in range(n_kv):
            key = r.string()
            self.kv[key] = _read_value(r, r.take("<I"))
        infos = []
        for _ in range(n_tensors):
            name = r.string()
            n_dims = r.take("<I")
            dims = [r.take("<Q") for _ in range(n_dims)]
            infos.append((name, dims, r.take("<I"), r.take("<Q")))
        align = int(self.kv.get("general.alignment", 32))
        data_start = (r.pos + align - 1) // align * align
        self.tensors = {}
        for name, dims, ttype, off in infos:
            n = int(np.prod(dims, dtype=np.int64)) if dims else 1
            start = data_start + off
            if start + _nbytes(ttype, n) > len(self.buf):
                raise GGUFError("tensor %s data out of file bounds" % name)
            self.tensors[name] = (dims, ttype, start)

    def has(self, name):
        return name in self.tensors

    def get(self, name, expect_dims=None):
        """Tensor as float64 numpy array with numpy shape = reversed ggml dims."""
        if name not in self.tensors:
            raise GGUFError("missing tensor %s" % name)
        dims, ttype, start = self.tensors[name]
        if expect_dims is not None and list(dims) != list(expect_dims):
            raise GGUFError("tensor %s has dims %s, expected %s" % (name, dims, list(expect_dims)))
        n = int(np.prod(dims, dtype=np.int64)) if dims else 1
        raw = memoryview(self.buf)[start:start + _nbytes(ttype, n)]
        return _decode(raw, ttype, n).reshape(tuple(reversed(dims)) if dims else ())


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, n_rot, base, freq_scale, ff, neox, mscale=1.0):
    """x: [n_tok, n_heads, head_dim]; rotates the first n_rot dims of each head,
    cos and sin scaled by mscale (LongRoPE attention factor)."""
    half = n_rot // 2
    i = np.arange(half, dtype=np.float64)
    inv = base ** (-2.0 * i / n_rot) / ff                            # [half]
    theta = (pos.astype(np.float64) * freq_scale)[:, None] * inv[None, :]  # [n_tok, half]
    cos, sin = mscale * np.cos(theta)[:, None, :], mscale * np.sin(theta)[:, None, :]
    out = x.copy()
    if neox:
        ia, ib = np.arange(half), np.arange(half) + half
    else:
        ia, ib = 2 * np.arange(half), 2 * np.arange(half) + 1
    a, b = x[:, :, ia], x[:, :, ib]
    out[:, :, ia] = a * cos - b * sin
    out[:, :, ib] = a * sin + b * cos
    return out


class Model:
    def __init__(self, g):
        self.g = g
        kv = g.kv
        arch = kv.get("general.architecture")
        if arch not in ("llama", "qwen2", "qwen3", "phi3", "gemma3"):
            raise GGUFError("unsupported general.architecture %r" % arch)
        self.gemma3 = arch == "gemma3"
        self.neox = arch != "llama"
        self.qk_norm = arch in ("qwen3", "gemma3")

        def hp(key, default=None):
            v = kv.get("%s.%s" % (arch, key), default)
            if v is None:
                raise GGUFError("missing key %s.%s" % (arch, key))
            return v

        self.n_layer = int(hp("block_count"))
        self.n_embd = int(hp("embedding_length"))
        self.n_ff = int(hp("feed_forward_length"))
        self.n_head = int(hp("attention.head_count"))
        self.n_head_kv = int(hp("attention.head_count_kv", self.n_head))
        self.head_dim = int(hp("attention.key_length", self.n_embd // self.n_head))
        self.head_dim_v = int(hp("attention.value_length", self.head_dim))
        self.eps = float(hp("attention.layer_norm_rms_epsilon"))
        self.base = float(hp("rope.freq_base", 10000.0))
        self.n_rot = int(hp("rope.dimension_count", self.head_dim))
        self.freq_scale = 1.0
        if hp("rope.scaling.type", "none") == "linear":
            self.freq_scale = 1.0 / float(hp("rope.scaling.factor", 1.0))
        if self.n_head % self.n_head_kv or self.n_rot % 2 or self.n_rot > self.head_dim:
            raise GGUFError("inconsistent head/rope hyperparameters")
        self.tok_embd = g.get("token_embd.weight")
        self.n_vocab = self.tok_embd.shape[0]
        if self.tok_embd.shape[1] != self.n_embd:
            raise GGUFError("token_embd.weight width %d != n_embd %d" % (self.tok_embd.shape[1], self.n_embd))
        self.ff = np.ones(self.n_rot // 2)
        self.mscale = 1.0
        if g.has("rope_freqs.weight"):
            self.ff = g.get("rope_freqs.weight", [self.n_rot // 2])
        if g.has("rope_factors_long.weight"):
            # LongRoPE: the context that selects is the trained one.
            ctx = int(hp("context_length", 4096))
            orig = int(hp("rope.scaling.original_context_length", ctx))
            which = "long" if ctx > orig else "short"
            self.ff = g.get("rope_factors_%s.weight" % which, [self.n_rot // 2])
            s = ctx / orig
            self.mscale = float(hp("rope.scaling.attn_factor",
                                   np.sqrt(1.0 + np.log(s) / np.log(orig)) if s > 1.0 else 1.0))
        self.window = int(hp("attention.sliding_window")) if self.gemma3 else 0
        self.attn_scale = 1.0 / np.sqrt(self.head_dim)
        if self.gemma3 and self.n_layer == 62:  # Gemma 3 27B: query_pre_attn_scalar = n_embd / n_head
            self.attn_scale = 1.0 / np.sqrt(self.n_embd // self.n_head)

    def layer_rope(self, il):
        """(base, freq_scale, factors) of layer il; gemma3 sliding layers: 10000, unscaled."""
        if self.gemma3 and self.sliding(il):
            return 10000.0, 1.0, np.ones(self.n_rot // 2)
        return self.base, self.freq_scale, self.ff

    def sliding(self, il):
        return self.gemma3 and il % 6 != 5

    def forward(self, tokens):
        g, E, F = self.g, self.n_embd, self.n_ff
        H, HKV, D, DV = self.n_head, self.n_head_kv, self.head_dim, self.head_dim_v
        toks = np.asarray(tokens, dtype=np.int64)
        n = len(toks)
        if n == 0 or toks.min() < 0 or toks.max() >= self.n_vocab:
            raise GGUFError("tokens must be non-empty and in [0, %d)" % self.n_vocab)
        pos = np.arange(n)
        x = self.tok_embd[toks]                                       # [n, E]
        if self.gemma3:
            x = x * np.sqrt(E)
        causal = np.triu(np.ones((n, n), dtype=bool), k=1)            # True = masked
        too_far = pos[:, None] - pos[None, :] >= max(self.window, 1)  # [query, key]: beyond the window
        for il in range(self.n_layer):
            p = "blk.%d." % il
            mask = causal | too_far if self.sliding(il) else causal
            h = rmsnorm(x, g.get(p + "attn_norm.weight", [E]), self.eps)
            if g.has(p + "attn_qkv.weight"):                          # phi3: rows q | k | v
                qkv = h @ g.get(p + "attn_qkv.weight", [E, H * D + HKV * D + HKV * DV]).T
                q, k, v = qkv[:, :H * D], qkv[:, H * D:H * D + HKV * D], qkv[:, H * D + HKV * D:]
            else:
                q = h @ g.get(p + "attn_q.weight", [E, H * D]).T
                k = h @ g.get(p + "attn_k.weight", [E, HKV * D]).T
                v = h @ g.get(p + "attn_v.weight", [E, HKV * DV]).T
            if g.has(p + "attn_q.bias"):
                q = q + g.get(p + "attn_q.bias", [H * D])
            if g.has(p + "attn_k.bias"):
                k = k + g.get(p + "attn_k.bias", [HKV * D])
            if g.has(p + "attn_v.bias"):
                v = v + g.get(p + "attn_v.bias", [HKV * DV])
            q, k = q.reshape(n, H, D), k.reshape(n, HKV, D)
            if self.qk_norm:                                          # qwen3, gemma3: per head, before RoPE
                q = rmsnorm(q, g.get(p + "attn_q_norm.weight", [D]), self.eps)
                k = rmsnorm(k, g.get(p + "attn_k_norm.weight", [D]), self.eps)
            base, freq_scale, ff = self.layer_rope(il)
            q = rope(q, pos, self.n_rot, base, freq_scale, ff, self.neox, self.mscale)
            k = rope(k, pos, self.n_rot, base, freq_scale, ff, self.neox, self.mscale)
            v = v.reshape(n, HKV, DV)
            grp = H // HKV
            k = np.repeat(k, grp, axis=1)                             # head h -> kv head h // grp
            v = np.repeat(v, grp, axis=1)
            s = np.einsum("qhd,khd->hqk", q, k) * self.attn_scale    # [H, n, n]
            s = np.where(mask[None], -np.inf, s)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s = s / s.sum(axis=-1, keepdims=True)
            attn = np.einsum("hqk,khd->qhd", s, v).reshape(n, H * DV)
            attn = attn @ g.get(p + "attn_output.weight", [H * DV, E]).T
            if self.gemma3:
                attn = rmsnorm(attn, g.get(p + "post_attention_norm.weight", [E]), self.eps)
            x = x + attn
            h = rmsnorm(x, g.get(p + "ffn_norm.weight", [E]), self.eps)
            if g.has(p + "ffn_gate.weight"):
                gate = h @ g.get(p + "ffn_gate.weight", [E, F]).T
                up = h @ g.get(p + "ffn_up.weight", [E, F]).T
            else:                                                     # phi3: rows gate | up
                gate_up = h @ g.get(p + "ffn_up.weight", [E, 2 * F]).T
                gate, up = gate_up[:, :F], gate_up[:, F:]
            if self.gemma3:  # GeGLU, GELU in its tanh approximation (ggml_gelu)
                act = 0.5 * gate * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (gate + 0.044715 * gate ** 3)))
            else:
                act = gate / (1.0 + np.exp(-gate))
            ffn = (act * up) @ g.get(p + "ffn_down.weight", [F, E]).T
            if self.gemma3:
                ffn = rmsnorm(ffn, g.get(p + "post_ffw_norm.weight", [E]), self.eps)
            x = x + ffn
        h = rmsnorm(x, g.get("output_norm.weight", [E]), self.eps)
        w_out = g.get("output.weight", [E, self.n_vocab]) if g.has("output.weight") else self.tok_embd
        return h @ w_out.T                                            # [n, n_vocab]


def compute_logits(model_path, tokens):
    return Model(GGUF(model_path)).forward(tokens)


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids, e.g. 1,5,9,2")
    ap.add_argument("--out", default="-", help="output file (default: binary stdout)")
    args = ap.parse_args(argv)
    try:
        tokens = [int(t) for t in args.tokens.split(",") if t.strip() != ""]
    except ValueError:
        sys.stderr.write("error: --tokens must be comma-separated integers\n")
        return 1
    try:
        with np.errstate(over="ignore"):  # exp(-gate) may overflow to inf -> silu 0, as intended
            logits = compute_logits(args.model, tokens)
    except (GGUFError, OSError) as e:
        sys.stderr.write("error: %s\n" % e)
        return 1
    data = np.ascontiguousarray(logits, dtype="<f4").tobytes()
    if args.out == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        with open(args.out, "wb") as f:
            f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
