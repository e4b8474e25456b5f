// KvCodecConfig: how a KV block is quantized, rotated, laid out and
// compressed (DESIGN.md "KV codec"). One config describes both the wire
// format of a KV stream and, for the edge store, its in-memory form.
//
// Names (to_string / parse_kv_codec_config), dash-separated, order free when
// parsing, canonical order when printing:
//   name    := bits { "-" option }
//   bits    := "f16" | "int8" | "int4"
//   option  := "g" N      scale group size (default 32; quantized codecs only)
//            | "pt"       per-token key groups along head_dim (default)
//            | "pc"       per-channel key groups: one channel over N tokens (KIVI)
//            | "pre"      keys quantized before RoPE (KVQuant); receiver applies RoPE
//            | "hk"       Walsh-Hadamard rotation of key heads
//            | "hv"       Walsh-Hadamard rotation of value heads
//            | "had"      both hk and hv
//            | "rows"     layout: per-group records (scale, min, codes), f16 whole
//            | "planes"   layout: codes plane, then scale/min planes, every f16
//                         array split into low-byte and high-byte planes (default)
//            | "z" L      zstd level L >= 1 (absent or z0: not compressed)
//            | "zf" L     zstd fast level -L
// Canonical: bits [-pc] [-gN] [-pre] [-had|-hk|-hv] [-rows] [-zL|-zfL], e.g.
// "int4-pc-g32-had-z3", "int8-g32", "f16-z1". F16 prints no group.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/engine/kv_cache.h"

namespace baton {

struct KvCodecConfig {
  enum class Bits { kF16, kInt8, kInt4 };
  enum class KeyAxis { kPerToken, kPerChannel };
  // Byte order of the quantized payload before zstd (see kv_codec.h).
  enum class Layout { kPlanes, kRows };

  // F16: lossless up to f16 rounding. INT8: symmetric, x = code * scale,
  // scale = amax / 127. INT4: asymmetric, x = code * scale + min, codes 0..15,
  // scale = (max - min) / 15. Scales and minimums are f16.
  Bits bits = Bits::kInt8;
  // Elements per scale group: along head_dim for values and per-token keys
  // (must divide head_dim); tokens per group for per-channel keys (values of
  // that config still group along head_dim, so it must divide head_dim too).
  int group_size = 32;
  KeyAxis key_axis = KeyAxis::kPerToken;
  bool pre_rope_keys = false;
  // Normalized (orthonormal, symmetric) Walsh-Hadamard transform of every
  // head vector before quantization; head_dim must be a power of two.
  bool hadamard_keys = false;
  bool hadamard_values = false;
  Layout layout = Layout::kPlanes;
  // 0: payload not compressed; 1..22 zstd levels; negative: zstd fast levels.
  int zstd_level = 0;

  bool quantized() const { return bits != Bits::kF16; }
  // The canonical name (see the grammar above).
  std::string to_string() const;
  // Checks the config on its own (group size in [1, 1024], even for INT4;
  // zstd level range).
  absl::Status validate() const;
  // Checks the config against a model's KV shape: group divides head_dim,
  // Hadamard needs a power-of-two head_dim.
  absl::Status validate(const KvGeometry& geometry) const;

  friend bool operator==(const KvCodecConfig&, const KvCodecConfig&) = default;
};

// Parses a name of the grammar above and validates it (without a geometry).
absl::StatusOr<KvCodecConfig> parse_kv_codec_config(std::string_view name);

const char* kv_bits_name(KvCodecConfig::Bits bits);  // "f16", "int8", "int4"

}  // namespace baton
