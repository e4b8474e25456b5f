#!/usr/bin/python3
"""Trains Baton's bundled toy model (baton-tiny-kjv) on CPU and exports it as GGUF.

One command, seeded and deterministic as far as torch allows:

    /usr/bin/python3 tools/train/train_tiny_model.py --out deploy/models

Pipeline (each step prints what it does):
  1. Extracts the King James Version from the Debian package `bible-kjv-text`
     (read with the `bible` CLI of package `bible-kjv`): one verse per line,
     verse references and chapter headers stripped, plain prose only.
  2. Held-out split: the LAST 2% of verses in canonical order
     (int(0.02 * 31102) = 622 verses = 2 Peter 1:1 .. Revelation 22:21, i.e. the
     books 2 Peter, 1-3 John, Jude, Revelation). Everything before is training data.
  3. SentencePiece BPE vocab (spm_train CLI, package `sentencepiece`) on the train
     split: vocab 4096, byte fallback, split digits, character coverage 1.0,
     unk/bos/eos = 0/1/2, no pad, identity normalization, extra whitespace kept,
     dummy prefix on. Checks that a llama.cpp-style tokenizer (prefix "▁",
     spaces -> "▁", score-driven BPE merges, byte fallback) reproduces spm_encode
     exactly on the held-out text and a sample of the training text.
  4. Trains a Llama-architecture model in torch on CPU (AdamW, warmup + cosine).
     Training sequences: `--seq` tokens cut at random offsets from the concatenated
     token stream of the train split (verses joined with no separator tokens; each
     verse starts with its "▁" prefix), fed as [BOS] + window[:-1], predicting all
     `--seq` window tokens.
  5. Evaluates held-out perplexity (recipe in EVAL_RECIPE below), exports
     baton-tiny-kjv-f16.gguf (GGUF v3, llama.cpp layout, F16 matrices, F32 norms),
     a reference-logits JSON, the held-out text and its token ids, the spm model;
     re-reads the GGUF with tests/tools/gguf_numpy_reference.py (an independent
     NumPy forward pass) and checks its logits against PyTorch's.

RoPE: adjacent pairs (2i, 2i+1) of each head, theta_i = pos * base^(-2i/head_dim),
(a, b) -> (a cos - b sin, a sin + b cos): llama.cpp's NORM mode, no q/k permutation.

`--export-only` reloads the checkpoint of a previous run from --work and redoes
steps 1-3 and 5 (the tokenizer is rebuilt deterministically).
"""
import argparse
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import time


def _early_threads(argv, default=1):
    """--threads, read before torch/numpy load so BLAS/OpenMP pools get the same size."""
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return int(argv[i + 1])
        if a.startswith("--threads="):
            return int(a.split("=", 1)[1])
    return default


DEFAULT_THREADS = 1
_THREADS = str(_early_threads(sys.argv, DEFAULT_THREADS))
os.environ.setdefault("OMP_NUM_THREADS", _THREADS)
os.environ.setdefault("OPENBLAS_NUM_THREADS", _THREADS)
# Idle OpenMP workers sleep instead of spinning: on a shared, oversubscribed machine
# spinning workers burn the CPU the other thread needs.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = "baton-tiny-kjv"
BIBLE_DATA = "/usr/lib/bible.data"
N_VERSES = 31102
HELDOUT_FRACTION = 0.02
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2

EVAL_RECIPE = (
    "Token-level perplexity over the held-out split. Token stream = the concatenation, in order, "
    "of the per-line spm_encode ids in baton-tiny-kjv.heldout.ids (each verse line encoded on its "
    "own with the dummy '▁' prefix; no BOS/EOS/separator tokens between lines). The stream is cut "
    "into consecutive non-overlapping chunks of SEQ tokens (the last chunk may be shorter). Each "
    "chunk is evaluated from a fresh context as input [BOS] + chunk[:-1] at positions 0..len-1, and "
    "EVERY chunk token is scored (chunk[0] is predicted from BOS alone). "
    "PPL = exp(sum of -log p(token) / number of scored tokens) = exp(mean NLL over all stream tokens)."
)


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


# ----------------------------------------------------------------------------- data

def extract_kjv():
    """Returns [(book, chapter, verse, text)] for all 31102 verses, canonical order."""
    if not os.path.exists(BIBLE_DATA) or not shutil.which("bible"):
        sys.exit("error: needs Debian packages bible-kjv-text and bible-kjv "
                 "(apt-get install -y bible-kjv-text bible-kjv)")
    raw = subprocess.run(["bible", "-l1000000", "Gen1:1-Rev22:21"], check=True,
                         capture_output=True, text=True).stdout
    verses, book, chap = [], None, None
    header = re.compile(r"^(\S.*) (\d+)$")
    verse = re.compile(r"^\s+(\d+) (.*)$")
    for line in raw.split("\n"):
        if not line.strip():
            continue
        m = verse.match(line)
        if m:
            text = " ".join(m.group(2).split())  # collapse any stray whitespace
            verses.append((book, chap, int(m.group(1)), text))
            continue
        m = header.match(line)
        if not m:
            sys.exit("error: unexpected line in bible output: %r" % line)
        book, chap = m.group(1), int(m.group(2))
    if len(verses) != N_VERSES:
        sys.exit("error: expected %d verses, got %d" % (N_VERSES, len(verses)))
    return verses


def package_version(pkg):
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# ----------------------------------------------------------------------------- tokenizer

SPM_FLAGS = [
    "--model_type=bpe", "--vocab_size=4096", "--byte_fallback=true", "--split_digits=true",
    "--character_coverage=1.0", "--unk_id=0", "--bos_id=1", "--eos_id=2", "--pad_id=-1",
    "--normalization_rule_name=identity", "--remove_extra_whitespaces=false",
    "--add_dummy_prefix=true", "--input_sentence_size=0", "--shuffle_input_sentence=false",
    "--max_sentence_length=16384", "--num_threads=1", "--minloglevel=1",
]


def train_spm(train_txt, prefix):
    subprocess.run(["spm_train", "--input=" + train_txt, "--model_prefix=" + prefix] + SPM_FLAGS,
                   check=True)
    out = subprocess.run(["spm_export_vocab", "--model=" + prefix + ".model", "--output_format=vocab"],
                         check=True, capture_output=True).stdout.decode("utf-8")
    pieces, scores = [], []
    for line in out.split("\n"):
        if line == "":
            continue
        p, s = line.rsplit("\t", 1)
        pieces.append(p)
        scores.append(float(s))
    types = []
    byte_re = re.compile(r"^<0x[0-9A-F]{2}>$")
    for i, p in enumerate(pieces):
        if i == UNK_ID:
            types.append(2)
        elif i in (BOS_ID, EOS_ID):
            types.append(3)
        elif byte_re.match(p) and i < 3 + 256:
            types.append(6)
        else:
            types.append(1)
    assert pieces[UNK_ID] == "<unk>" and pieces[BOS_ID] == "<s>" and pieces[EOS_ID] == "</s>"
    assert sum(t == 6 for t in types) == 256, "expected 256 byte-fallback pieces"
    return pieces, scores, types


def spm_encode(model, txt_path):
    out = subprocess.run(["spm_encode", "--model=" + model, "--output_format=id", "--input=" + txt_path],
                         check=True, capture_output=True).stdout.decode("utf-8")
    lines = out.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [[int(t) for t in l.split()] for l in lines]


class LlamaSpmTokenizer:
    """Re-implementation of llama.cpp's SPM tokenizer (llm_tokenizer_spm) for checking."""

    def __init__(self, pieces, scores, types):
        self.vocab = {p: i for i, p in enumerate(pieces)}
        self.scores, self.pieces, self.types = scores, pieces, types

    def encode(self, text, add_space_prefix=True):
        if add_space_prefix:
            text = " " + text
        text = text.replace(" ", "\u2581")
        sym = list(text)  # UTF-8 characters
        while len(sym) > 1:
            best, best_i = None, -1
            for i in range(len(sym) - 1):
                tid = self.vocab.get(sym[i] + sym[i + 1])
                if tid is None or self.types[tid] != 1:
                    continue
                s = self.scores[tid]
                if best is None or s > best:  # ties: leftmost wins
                    best, best_i = s, i
            if best_i < 0:
                break
            sym[best_i:best_i + 2] = [sym[best_i] + sym[best_i + 1]]
        ids = []
        for s in sym:
            tid = self.vocab.get(s)
            if tid is not None and self.types[tid] == 1:
                ids.append(tid)
            else:
                for b in s.encode("utf-8"):
                    ids.append(self.vocab["<0x%02X>" % b])
        return ids

    def decode(self, ids):
        out, pending = [], bytearray()
        for t in ids:
            if self.types[t] == 6:
                pending.append(int(self.pieces[t][3:5], 16))
                continue
            if pending:
                out.append(pending.decode("utf-8", errors="replace"))
                pending = bytearray()
            if self.types[t] == 1:
                out.append(self.pieces[t].replace("\u2581", " "))
        if pending:
            out.append(pending.decode("utf-8", errors="replace"))
        s = "".join(out)
        return s[1:] if s.startswith(" ") else s


# ----------------------------------------------------------------------------- model

class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(n_ctx, head_dim, base):
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    inv = base ** (-2.0 * i / head_dim)
    theta = torch.arange(n_ctx, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(theta).float(), torch.sin(theta).float()


def apply_rope(x, cos, sin):
    """x: [B, T, H, D]; rotates adjacent pairs (2i, 2i+1) (llama.cpp NORM mode)."""
    B, T, H, D = x.shape
    x2 = x.view(B, T, H, D // 2, 2)
    a, b = x2[..., 0], x2[..., 1]
    c, s = cos[:T, None, :], sin[:T, None, :]
    return torch.stack((a * c - b * s, a * s + b * c), dim=-1).view(B, T, H, D)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, H, KV, D, FF = cfg["n_embd"], cfg["n_head"], cfg["n_kv"], cfg["head_dim"], cfg["n_ff"]
        self.H, self.KV, self.D = H, KV, D
        self.attn_norm = RMSNorm(E, cfg["eps"])
        self.wq = nn.Linear(E, H * D, bias=False)
        self.wk = nn.Linear(E, KV * D, bias=False)
        self.wv = nn.Linear(E, KV * D, bias=False)
        self.wo = nn.Linear(H * D, E, bias=False)
        self.ffn_norm = RMSNorm(E, cfg["eps"])
        self.w_gate = nn.Linear(E, FF, bias=False)
        self.w_up = nn.Linear(E, FF, bias=False)
        self.w_down = nn.Linear(FF, E, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = apply_rope(self.wq(h).view(B, T, self.H, self.D), cos, sin).transpose(1, 2)
        k = apply_rope(self.wk(h).view(B, T, self.KV, self.D), cos, sin).transpose(1, 2)
        v = self.wv(h).view(B, T, self.KV, self.D).transpose(1, 2)
        grp = self.H // self.KV
        k = k.repeat_interleave(grp, dim=1)  # head h uses kv head h // grp
        v = v.repeat_interleave(grp, dim=1)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.D))
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, self.H * self.D)
        x = x + self.wo(y)
        h = self.ffn_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_embd = nn.Embedding(cfg["n_vocab"], cfg["n_embd"])
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])])
        self.norm = RMSNorm(cfg["n_embd"], cfg["eps"])
        self.output = nn.Linear(cfg["n_embd"], cfg["n_vocab"], bias=False)
        cos, sin = rope_tables(cfg["n_ctx"], cfg["head_dim"], cfg["rope_base"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("mask", torch.triu(torch.ones(cfg["n_ctx"], cfg["n_ctx"], dtype=torch.bool), 1),
                             persistent=False)
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(2 * cfg["n_layer"]) if name.endswith(("wo.weight", "w_down.weight")) else std
                nn.init.normal_(p, mean=0.0, std=s)

    def forward(self, idx):
        x = self.tok_embd(idx)
        for b in self.blocks:
            x = b(x, self.cos, self.sin, self.mask)
        return self.output(self.norm(x))


def count_params(model):
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------- eval

@torch.no_grad()
def heldout_nll(model, stream, seq, max_chunks=None, batch=8):
    """Returns (sum NLL, n scored tokens) following EVAL_RECIPE."""
    model.eval()
    chunks = [stream[i:i + seq] for i in range(0, len(stream), seq)]
    if max_chunks:
        chunks = chunks[:max_chunks]
    total, count = 0.0, 0
    full = [c for c in chunks if len(c) == seq]
    rest = [c for c in chunks if len(c) != seq]
    groups = [full[i:i + batch] for i in range(0, len(full), batch)] + [[c] for c in rest]
    for g in groups:
        tgt = torch.tensor(g, dtype=torch.long)
        inp = torch.cat([torch.full((len(g), 1), BOS_ID, dtype=torch.long), tgt[:, :-1]], dim=1)
        logits = model(inp).double()
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="sum")
        total += float(nll)
        count += tgt.numel()
    model.train()
    return total, count


@torch.no_grad()
def generate(model, prompt_ids, n_new, temperature=0.0, top_k=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = list(prompt_ids)
    for _ in range(n_new):
        logits = model(torch.tensor([ids[-model.cfg["n_ctx"]:]]))[0, -1].double()
        if temperature <= 0:
            nxt = int(torch.argmax(logits))
        else:
            v, ix = torch.topk(logits / temperature, top_k)
            nxt = int(ix[torch.multinomial(torch.softmax(v, -1), 1, generator=g)])
        if nxt == EOS_ID:
            break
        ids.append(nxt)
    return ids


# ----------------------------------------------------------------------------- GGUF

GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STR, GGUF_ARR = 4, 5, 6, 7, 8, 9
GGML_F32, GGML_F16 = 0, 1


def _gstr(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _gval(vtype, v):
    if vtype == GGUF_U32:
        return struct.pack("<I", v)
    if vtype == GGUF_I32:
        return struct.pack("<i", v)
    if vtype == GGUF_F32:
        return struct.pack("<f", v)
    if vtype == GGUF_BOOL:
        return struct.pack("<B", 1 if v else 0)
    if vtype == GGUF_STR:
        return _gstr(v)
    raise ValueError(vtype)


def write_gguf(path, kvs, tensors, align=32):
    """kvs: [(key, type, value)] (arrays: (key, GGUF_ARR, (elem_type, list)));
    tensors: [(name, np.ndarray float16/float32)] numpy shape = reversed ggml dims."""
    kvs = [("general.alignment", GGUF_U32, align)] + list(kvs)
    head = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for key, vtype, v in kvs:
        head += _gstr(key) + struct.pack("<I", vtype)
        if vtype == GGUF_ARR:
            et, items = v
            head += struct.pack("<IQ", et, len(items))
            if et == GGUF_F32:
                head += np.asarray(items, dtype="<f4").tobytes()
            elif et == GGUF_I32:
                head += np.asarray(items, dtype="<i4").tobytes()
            else:
                head += b"".join(_gval(et, x) for x in items)
        else:
            head += _gval(vtype, v)
    data, infos = bytearray(), []
    for name, arr in tensors:
        if arr.dtype == np.float16:
            ttype, raw = GGML_F16, np.ascontiguousarray(arr, dtype="<f2").tobytes()
        elif arr.dtype == np.float32:
            ttype, raw = GGML_F32, np.ascontiguousarray(arr, dtype="<f4").tobytes()
        else:
            raise ValueError("unsupported dtype %s for %s" % (arr.dtype, name))
        data += b"\0" * (-len(data) % align)
        infos.append((name, list(reversed(arr.shape)), ttype, len(data)))
        data += raw
    for name, dims, ttype, off in infos:
        head += _gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", ttype, off)
    head += b"\0" * (-len(head) % align)
    with open(path, "wb") as f:
        f.write(head)
        f.write(data)


def gguf_tensors(model):
    """llama.cpp tensor names; nn.Linear weight (out, in) == GGUF dims [in, out]."""
    f16 = lambda t: t.detach().to(torch.float16).numpy()
    f32 = lambda t: t.detach().to(torch.float32).numpy()
    out = [("token_embd.weight", f16(model.tok_embd.weight)),
           ("output_norm.weight", f32(model.norm.weight)),
           ("output.weight", f16(model.output.weight))]
    for i, b in enumerate(model.blocks):
        p = "blk.%d." % i
        out += [(p + "attn_norm.weight", f32(b.attn_norm.weight)),
                (p + "attn_q.weight", f16(b.wq.weight)),
                (p + "attn_k.weight", f16(b.wk.weight)),
                (p + "attn_v.weight", f16(b.wv.weight)),
                (p + "attn_output.weight", f16(b.wo.weight)),
                (p + "ffn_norm.weight", f32(b.ffn_norm.weight)),
                (p + "ffn_gate.weight", f16(b.w_gate.weight)),
                (p + "ffn_up.weight", f16(b.w_up.weight)),
                (p + "ffn_down.weight", f16(b.w_down.weight))]
    return out


def gguf_kvs(cfg, pieces, scores, types, name):
    return [
        ("general.architecture", GGUF_STR, "llama"),
        ("general.name", GGUF_STR, name),
        ("general.description", GGUF_STR,
         "Toy Llama-architecture model trained on the King James Version (public domain) "
         "by tools/train/train_tiny_model.py; for demos and KV-codec measurements only."),
        ("general.license", GGUF_STR, "public-domain"),
        ("general.file_type", GGUF_U32, 1),
        ("llama.context_length", GGUF_U32, cfg["n_ctx"]),
        ("llama.embedding_length", GGUF_U32, cfg["n_embd"]),
        ("llama.block_count", GGUF_U32, cfg["n_layer"]),
        ("llama.feed_forward_length", GGUF_U32, cfg["n_ff"]),
        ("llama.attention.head_count", GGUF_U32, cfg["n_head"]),
        ("llama.attention.head_count_kv", GGUF_U32, cfg["n_kv"]),
        ("llama.attention.layer_norm_rms_epsilon", GGUF_F32, cfg["eps"]),
        ("llama.rope.freq_base", GGUF_F32, cfg["rope_base"]),
        ("llama.rope.dimension_count", GGUF_U32, cfg["head_dim"]),
        ("llama.vocab_size", GGUF_U32, cfg["n_vocab"]),
        ("tokenizer.ggml.model", GGUF_STR, "llama"),
        ("tokenizer.ggml.tokens", GGUF_ARR, (GGUF_STR, pieces)),
        ("tokenizer.ggml.scores", GGUF_ARR, (GGUF_F32, scores)),
        ("tokenizer.ggml.token_type", GGUF_ARR, (GGUF_I32, types)),
        ("tokenizer.ggml.bos_token_id", GGUF_U32, BOS_ID),
        ("tokenizer.ggml.eos_token_id", GGUF_U32, EOS_ID),
        ("tokenizer.ggml.unknown_token_id", GGUF_U32, UNK_ID),
        ("tokenizer.ggml.add_bos_token", GGUF_BOOL, True),
        ("tokenizer.ggml.add_eos_token", GGUF_BOOL, False),
        ("tokenizer.ggml.add_space_prefix", GGUF_BOOL, True),
    ]


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "deploy", "models"))
    ap.add_argument("--work", default="/tmp/baton-tiny-kjv-work", help="intermediate files + checkpoint")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                    help="torch/BLAS threads (1 beats 2 for these 256-wide matrices, and on a busy machine)")
    ap.add_argument("--steps", type=int, default=450)
    ap.add_argument("--batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--seq", type=int, default=256, help="training / evaluation sequence length")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--n-ff", type=int, default=768)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--export-only", action="store_true", help="reuse --work/ckpt.pt, skip training")
    args = ap.parse_args()

    t_start = time.time()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)

    # 1-2. data + split
    verses = extract_kjv()
    n_held = int(HELDOUT_FRACTION * len(verses))
    train_v, held_v = verses[:-n_held], verses[-n_held:]
    ref = lambda v: "%s %d:%d" % v[:3]
    log("KJV: %d verses; train %d (%s .. %s), held-out %d (%s .. %s)" % (
        len(verses), len(train_v), ref(train_v[0]), ref(train_v[-1]), len(held_v), ref(held_v[0]), ref(held_v[-1])))
    train_txt = os.path.join(args.work, "train.txt")
    held_txt = os.path.join(args.out, NAME + ".heldout.txt")
    with open(train_txt, "w", encoding="utf-8") as f:
        f.writelines(v[3] + "\n" for v in train_v)
    with open(held_txt, "w", encoding="utf-8") as f:
        f.writelines(v[3] + "\n" for v in held_v)
    assert os.path.getsize(held_txt) <= 200 * 1024, "held-out text over 200 KB"

    # 3. tokenizer
    prefix = os.path.join(args.work, "spm")
    pieces, scores, types = train_spm(train_txt, prefix)
    spm_model = os.path.join(args.out, NAME + ".spm.model")
    shutil.copyfile(prefix + ".model", spm_model)
    train_ids = spm_encode(spm_model, train_txt)
    held_ids = spm_encode(spm_model, held_txt)
    assert len(train_ids) == len(train_v) and len(held_ids) == len(held_v)
    with open(os.path.join(args.out, NAME + ".heldout.ids"), "w") as f:
        f.writelines(" ".join(map(str, l)) + "\n" for l in held_ids)
    tok = LlamaSpmTokenizer(pieces, scores, types)
    check_lines = [(v[3], ids) for v, ids in zip(held_v, held_ids)]
    check_lines += [(train_v[i][3], train_ids[i]) for i in range(0, len(train_v), 25)]
    bad = [t for t, ids in check_lines if tok.encode(t) != ids]
    if bad:
        sys.exit("error: llama.cpp-style tokenizer disagrees with spm_encode on %d of %d lines, e.g. %r"
                 % (len(bad), len(check_lines), bad[0]))
    bad = [t for t, ids in check_lines if tok.decode(ids) != t]
    if bad:
        sys.exit("error: decode mismatch on %d lines, e.g. %r" % (len(bad), bad[0]))
    train_stream = [t for l in train_ids for t in l]
    held_stream = [t for l in held_ids for t in l]
    log("tokenizer: %d pieces; llama.cpp-style re-tokenization == spm_encode on %d lines; "
        "train %d tokens, held-out %d tokens" % (len(pieces), len(check_lines), len(train_stream), len(held_stream)))

    cfg = dict(n_vocab=len(pieces), n_embd=args.n_embd, n_layer=args.n_layer, n_head=8, n_kv=2,
               head_dim=args.n_embd // 8, n_ff=args.n_ff, eps=1e-5, rope_base=10000.0, n_ctx=1024)
    assert cfg["n_ff"] % 32 == 0 and cfg["n_embd"] % 32 == 0
    model = Llama(cfg)
    n_params = count_params(model)
    log("model: %s, %d parameters" % (json.dumps(cfg), n_params))

    ckpt = os.path.join(args.work, "ckpt.pt")
    train_info = {}
    if args.export_only:
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        train_info = state["train_info"]
        log("loaded %s" % ckpt)
    else:
        # 4. training
        decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "tok_embd" not in n]
        no_decay = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "tok_embd" not in n)]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
        data = torch.tensor(train_stream, dtype=torch.long)
        gen = torch.Generator().manual_seed(args.seed)
        S, B = args.seq, args.batch

        def lr_at(step):
            if step < args.warmup:
                return args.lr * (step + 1) / args.warmup
            pr = (step - args.warmup) / max(1, args.steps - args.warmup)
            return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * pr))

        t0, loss_ema = time.time(), None
        log("training: %d steps x %d seqs x %d tokens = %.2fM tokens (%.2f epochs)" % (
            args.steps, B, S, args.steps * B * S / 1e6, args.steps * B * S / len(train_stream)))
        for step in range(args.steps):
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            off = torch.randint(0, len(data) - S, (B,), generator=gen)
            tgt = torch.stack([data[o:o + S] for o in off.tolist()])
            inp = torch.cat([torch.full((B, 1), BOS_ID, dtype=torch.long), tgt[:, :-1]], dim=1)
            logits = model(inp)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            lv = float(loss)
            loss_ema = lv if loss_ema is None else 0.95 * loss_ema + 0.05 * lv
            if step % 10 == 0 or step == args.steps - 1:
                el = time.time() - t0
                eta = el / (step + 1) * (args.steps - step - 1)
                log("step %5d/%d loss %.4f (ema %.4f) lr %.2e | %.0f tok/s | elapsed %.1f min, ETA %.1f min" % (
                    step, args.steps, lv, loss_ema, lr_at(step), (step + 1) * B * S / el, el / 60, eta / 60))
            if args.eval_every and (step + 1) % args.eval_every == 0 and step + 1 < args.steps:
                s, n = heldout_nll(model, held_stream, S, max_chunks=16)
                log("  held-out (first 16 chunks) loss %.4f ppl %.2f" % (s / n, math.exp(s / n)))
        train_s = time.time() - t0
        train_info = dict(steps=args.steps, batch=B, seq=S, tokens_seen=args.steps * B * S,
                          epochs=args.steps * B * S / len(train_stream), train_wall_s=round(train_s, 1),
                          final_loss_ema=round(loss_ema, 4), lr=args.lr, min_lr=args.min_lr,
                          warmup=args.warmup, weight_decay=args.weight_decay, seed=args.seed,
                          threads=args.threads, optimizer="AdamW(betas=0.9,0.95) + linear warmup + cosine")
        torch.save({"model": model.state_dict(), "cfg": cfg, "train_info": train_info}, ckpt)
        log("training done in %.1f min; checkpoint %s" % (train_s / 60, ckpt))

    # 5. evaluation + export
    S = train_info.get("seq", args.seq)
    s32, n32 = heldout_nll(model, held_stream, S)
    with torch.no_grad():  # round to exactly what the GGUF stores
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.copy_(p.to(torch.float16).to(torch.float32))
    model.eval()
    s16, n16 = heldout_nll(model, held_stream, S)
    ppl32, ppl16 = math.exp(s32 / n32), math.exp(s16 / n16)
    log("held-out perplexity over %d tokens: %.3f (fp32 weights), %.3f (f16-rounded weights, as in the GGUF)"
        % (n16, ppl32, ppl16))

    gguf_path = os.path.join(args.out, NAME + "-f16.gguf")
    write_gguf(gguf_path, gguf_kvs(cfg, pieces, scores, types, NAME), gguf_tensors(model))
    size = os.path.getsize(gguf_path)
    log("wrote %s (%.2f MB)" % (gguf_path, size / 1e6))
    assert size <= 25 * 1000 * 1000

    ref_tokens = [BOS_ID] + held_stream[:31]
    with torch.no_grad():
        logits = model(torch.tensor([ref_tokens]))[0].float()
    greedy = generate(model, ref_tokens, 16)[len(ref_tokens):]
    topk = torch.topk(logits, 20, dim=-1)
    reference = {
        "model": os.path.basename(gguf_path),
        "note": "PyTorch float32 forward pass with the weights rounded to float16 exactly as stored in the GGUF.",
        "tokens": ref_tokens,
        "text": tok.decode(ref_tokens[1:]),
        "n_vocab": cfg["n_vocab"],
        "top20": [{"pos": i, "ids": topk.indices[i].tolist(), "logits": [round(float(v), 5) for v in topk.values[i]]}
                  for i in range(len(ref_tokens))],
        "last_logits": [round(float(v), 5) for v in logits[-1]],
        "greedy_continuation_ids": greedy,
        "greedy_continuation_text": tok.decode(greedy),
        "perplexity": {"heldout_f16_weights": round(ppl16, 4), "heldout_fp32_weights": round(ppl32, 4),
                       "scored_tokens": n16, "chunk_tokens": S, "recipe": EVAL_RECIPE.replace("SEQ", str(S)),
                       "heldout_verses": "%s .. %s (last %d of %d verses)" % (ref(held_v[0]), ref(held_v[-1]),
                                                                             len(held_v), len(verses))},
        "config": cfg,
        "n_params": n_params,
        "training": train_info,
        "data": {"package": "bible-kjv-text", "version": package_version("bible-kjv-text"),
                 "spm_train_flags": SPM_FLAGS},
    }
    ref_path = os.path.join(args.out, NAME + ".reference.json")
    with open(ref_path, "w") as f:
        json.dump(reference, f, indent=1)
        f.write("\n")

    # Independent check: NumPy forward pass that parses the GGUF.
    npref = os.path.join(REPO, "tests", "tools", "gguf_numpy_reference.py")
    out_bin = os.path.join(args.work, "numpy_logits.bin")
    subprocess.run(["/usr/bin/python3", npref, gguf_path, "--tokens", ",".join(map(str, ref_tokens)),
                    "--out", out_bin], check=True)
    np_logits = np.fromfile(out_bin, dtype="<f4").reshape(len(ref_tokens), cfg["n_vocab"])
    diff = float(np.abs(np_logits - logits.numpy()).max())
    log("NumPy GGUF reference vs PyTorch logits: max |diff| = %.2e over %d positions" % (diff, len(ref_tokens)))
    if diff > 1e-2:
        sys.exit("error: GGUF export does not reproduce PyTorch (max diff %.3g)" % diff)

    # Samples.
    for prompt in ["In the beginning", "And Jesus said unto them,", "The LORD is my shepherd;"]:
        p = [BOS_ID] + tok.encode(prompt)
        log("greedy  | %s" % tok.decode(generate(model, p, 48)[1:]))
        log("sampled | %s" % tok.decode(generate(model, p, 48, temperature=0.8, top_k=40, seed=args.seed)[1:]))
    log("total wall time %.1f min" % ((time.time() - t_start) / 60))


if __name__ == "__main__":
    main()
