#!/usr/bin/python3
"""Writes tests/data/kquants/tensor-sha256.json from llama.cpp's reference GGUFs.

The quantized reference models (4-5 MB each, ../shared/testdata/kquants) stay out
of git; this manifest keeps what the tests need from them: per file, per tensor,
its ggml type name, dims (ggml order) and the SHA-256 of its data bytes. A file
that `baton model quantize` writes must match it tensor for tensor.

Usage: tests/tools/kquant_manifest.py DIR_WITH_tiny-*.gguf > tests/data/kquants/tensor-sha256.json
Standard library only (struct, hashlib, json).
"""
import hashlib
import json
import struct
import sys

# ggml type id -> (name as ggml prints it, block elements, block bytes)
TYPES = {0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20),
         6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34), 12: ("q4_K", 256, 144),
         13: ("q5_K", 256, 176), 14: ("q6_K", 256, 210), 30: ("bf16", 1, 2)}
FILES = ["tiny-q4_k_m.gguf", "tiny-q5_k_m.gguf", "tiny-q6_k.gguf", "tiny-q4_0-default.gguf"]


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        values = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return values[0] if len(values) == 1 else values

    def string(self):
        n = self.take("Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, vtype):
        scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
        if vtype in scalar:
            return self.take(scalar[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            inner, n = self.take("I"), self.take("Q")
            return [self.value(inner) for _ in range(n)]
        raise ValueError("unknown GGUF value type %d" % vtype)


def manifest(path):
    data = open(path, "rb").read()
    r = Reader(data)
    magic, version, n_tensors, n_kv = r.take("4sIQQ")
    assert magic == b"GGUF" and version == 3, path
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.take("I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("Q") for _ in range(r.take("I"))]
        infos.append((name, dims, r.take("I"), r.take("Q")))
    align = meta.get("general.alignment", 32)
    base = (r.pos + align - 1) // align * align
    out = {"general.file_type": meta.get("general.file_type"), "tensors": {}}
    for name, dims, type_id, offset in infos:
        type_name, block, block_bytes = TYPES[type_id]
        n = 1
        for d in dims:
            n *= d
        size = n // block * block_bytes
        blob = data[base + offset:base + offset + size]
        assert len(blob) == size, name
        out["tensors"][name] = {"type": type_name, "dims": dims, "sha256": hashlib.sha256(blob).hexdigest()}
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "../shared/testdata/kquants"
    result = {name: manifest(src + "/" + name) for name in FILES}
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
