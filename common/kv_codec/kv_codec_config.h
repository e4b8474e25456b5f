// KvCodecConfig: how a KV block is quantized, rotated, laid out and
// compressed (DESIGN.md "KV codec"). One config describes both the wire
// format of a KV stream and, for the edge store, its in-memory form.
//
// Names (to_string / parse_kv_codec_config), dash-separated, order free when
// parsing, canonical order when printing:
//   name    := bits { "-" option }
//   bits    := "f16" | "int8" | "int4"
//   option  := "g" N      scale group size (default 32; quantized codecs only)
//            | "k8"       keys INT8 whatever the value bits (mixed precision,
//                         e.g. int4-k8: INT8 keys, INT4 values; int8-k8 = int8)
//            | "kg" N     key group size (default: the g size): along head_dim
//                         for per-token keys, tokens per group for "pc" keys
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
//
// The transform codec (kv_transform_codec.h) has names of its own:
//   tc      := "tc-b" B [ "-s" S ] [ "-w" W ] [ "-z" L ]
//   B: bits per element of the transform-coded tokens, one decimal place
//   (tc-b2.5); S: sink tokens (positions [0, S)) and W: recent tokens (the
//   stream's last W), both sent as INT8; zL: the zstd back end at level L
//   instead of rANS (the baseline). Defaults s4 and w16 print nothing.
// Canonical: bits [-k8] [-pc] [-kgN] [-gN] [-pre] [-had|-hk|-hv] [-rows]
// [-zL|-zfL], e.g. "int4-pc-g32-had-z3", "int4-k8-g32-z3",
// "int4-pc-kg128-g32-z3", "int8-g32", "f16-z1". F16 prints no group; k8 and
// kgN print only where they differ from bits and gN (parsing normalizes
// "int8-k8" to "int8" and "kg32-g32" to "g32").
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_codec/kv_geometry.h"
#include "common/util/sha256.h"

namespace baton {

// The transform codec's parameters (kv_transform_codec.h).
struct KvTransformParams {
  static constexpr int kDefaultSinkTokens = 4;
  static constexpr int kDefaultRecentTokens = 16;
  // Bits per element of the transform-coded tokens, in tenths (25: 2.5 bits),
  // in [1, 80]: the budget the bit allocation spends per (layer, K|V).
  int budget_tenths = 25;
  // Positions [0, sink_tokens) and the stream's last recent_tokens positions
  // travel as INT8 (attention sinks and the tokens the next query leans on).
  int sink_tokens = kDefaultSinkTokens;
  int recent_tokens = kDefaultRecentTokens;
  // SHA-256 of the calibration (kv_calibration.h) both ends must hold; all
  // zero until bound (bind_kv_calibration). Not part of the name.
  Digest256 calibration{};

  bool bound() const;
  friend bool operator==(const KvTransformParams&, const KvTransformParams&) = default;
};

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
  // key_group_size overrides it for keys.
  int group_size = 32;
  // Mixed precision: bits of the keys when they differ from `bits` (keys are
  // the more sensitive half: an error in k moves every softmax weight). Unset:
  // keys use `bits`. Only kInt8 with bits kInt4 is a real mix; keys may not
  // be narrower than values, and F16 does not mix.
  std::optional<Bits> key_bits;
  // Key group size when it differs from group_size; 0: group_size. With
  // per-channel keys it is tokens per group and need not divide head_dim
  // (e.g. kg128 keys with g32 values on head_dim 32).
  int key_group_size = 0;
  KeyAxis key_axis = KeyAxis::kPerToken;
  bool pre_rope_keys = false;
  // Normalized (orthonormal, symmetric) Walsh-Hadamard transform of every
  // head vector before quantization; head_dim must be a power of two.
  bool hadamard_keys = false;
  bool hadamard_values = false;
  Layout layout = Layout::kPlanes;
  // 0: payload not compressed; 1..22 zstd levels; negative: zstd fast levels.
  // Transform codec: 0 = rANS back end, else zstd at that level.
  int zstd_level = 0;
  // Set: the transform codec. Its sink and recent rows are INT8 with groups
  // of min(32, head_dim) (bits kInt8, the store form: store_config_for),
  // keys are pre-RoPE (pre_rope_keys true), no Hadamard, planes.
  std::optional<KvTransformParams> transform;

  bool quantized() const { return bits != Bits::kF16; }
  bool transform_coded() const { return transform.has_value(); }
  // Bits and group size of keys (is_key) or values, defaults resolved.
  Bits bits_for(bool is_key) const { return is_key && key_bits ? *key_bits : bits; }
  int group_size_for(bool is_key) const { return is_key && key_group_size > 0 ? key_group_size : group_size; }
  // The canonical name (see the grammar above).
  std::string to_string() const;
  // Checks the config on its own (group sizes in [1, 1024], even for INT4;
  // key bits at least the value bits, no F16 mix; zstd level range).
  absl::Status validate() const;
  // Checks the config against a model's KV shape: the value group (and the
  // key group of per-token keys) divides head_dim, Hadamard needs a
  // power-of-two head_dim.
  absl::Status validate(const KvGeometry& geometry) const;

  friend bool operator==(const KvCodecConfig&, const KvCodecConfig&) = default;
};

// Parses a name of the grammar above and validates it (without a geometry).
absl::StatusOr<KvCodecConfig> parse_kv_codec_config(std::string_view name);

// The transform codec with `params` (bits kInt8, pre-RoPE keys).
KvCodecConfig transform_kv_codec_config(const KvTransformParams& params, int zstd_level = 0);

const char* kv_bits_name(KvCodecConfig::Bits bits);  // "f16", "int8", "int4"

// Tokens a key block's token count must be a multiple of (except a segment's
// last block), because per-channel key groups start at the block's first
// token: the key group size for quantized per-channel keys, else 1. Senders
// cut blocks with it; receivers check it (kv_stream.h default_kv_block_rule).
int key_group_tokens(const KvCodecConfig& config);

}  // namespace baton

namespace baton {

// The default variant for each width, chosen from `baton bench kv-quality` and
// `baton bench kv-codec` on the bundled model (see README "KV codec"):
//   f16  -> f16-z3
//   int8 -> int8-g32-z3            (+0.01% perplexity, 0.50 of F16 on the wire)
//   int4 -> int4-pc-kg128-g32-z3   (+0.07% perplexity, 0.27 of F16 on the wire)
// Groups along head_dim shrink to head_dim for models with narrow heads.
KvCodecConfig default_kv_codec_config(KvCodecConfig::Bits bits, const KvGeometry& geometry);

}  // namespace baton
