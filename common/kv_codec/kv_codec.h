// The KV codec: encodes one KV block (one layer's K or V for a token range)
// to the bytes of KvBlock.payload and back (proto/baton.proto; DESIGN.md "KV
// codec"). This file is the authoritative description of the payload.
//
// Encoding: f32 [T, H, D] (T tokens, H = n_head_kv, D = head_dim) ->
// optional Walsh-Hadamard rotation of each head vector (hadamard_keys /
// hadamard_values) -> quantization -> byte layout -> optional zstd frame.
//
// Keys and values may differ in bits and group (config.bits_for(is_key),
// group_size_for(is_key): e.g. int4-k8 has INT8 keys and INT4 values); every
// shape and size below is per kind, with that kind's bits and G.
//
// Quantized form (QuantizedKvBlock), G = the kind's group size:
//   F16:  values f16 [T, H, D].
//   INT8: codes int8 [T, H, D] (symmetric, x = code * scale, |code| <= 127);
//         scales f16: [T, H, D/G] for values and per-token keys,
//                     [ceil(T/G), H, D] for per-channel keys (token group j
//                     covers tokens [j*G, min(T, (j+1)*G)) of the block).
//   INT4: codes [T, H, D/2] bytes, element 2i in the low nibble of byte i;
//         asymmetric, x = code * scale + min; scales and mins f16, shaped as
//         INT8's scales.
// Byte layout of the raw payload (before zstd; little-endian):
//   planes (default): codes (F16: values), then scales, then mins (INT4);
//     every f16 array is written as two planes: all low bytes, then all high
//     bytes (the high bytes, sign and exponent, compress well).
//   rows: F16 values as is; INT8/INT4 per-token: for each token, for each
//     group: scale f16, [min f16,] codes of the group; per-channel keys: for
//     each token group: scales [H*D] f16, [mins [H*D] f16,] codes of its tokens.
//     The measured baseline (`baton bench kv-codec`): on llama-3.2-1b-shaped
//     K/V planes compress better (f16-z3 0.847 vs 0.919 of F16, int4-g32-z3
//     0.299 vs 0.302), so planes is the wire format; CodecParams has no layout
//     field, so streams must use planes.
// raw_size is the same for both layouts:
//   F16: 2*T*H*D;  INT8: T*H*D + 2*n_groups;  INT4: T*H*D/2 + 4*n_groups.
// The payload is one zstd frame of raw_size bytes (with its content size) when
// zstd_level != 0, else the raw bytes.
//
// Keys are in the domain the config says: pre-RoPE keys when pre_rope_keys
// (the decoder applies RoPE for positions first_position, ...), rotated by
// Hadamard when hadamard_keys (the f32 decoder rotates back; the quantized
// store keeps them rotated and rotates queries instead).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_codec/kv_geometry.h"
#include "common/kv_codec/kv_codec_config.h"

namespace baton {

struct EncodedKvBlock {
  std::string payload;    // KvBlock.payload: raw layout, zstd-compressed when zstd_level != 0
  uint64_t raw_size = 0;  // bytes of the raw layout before zstd
};

// A block in quantized form (see the file comment for shapes), as the wire
// carries it after decompression and as QuantizedKvCache stores it.
struct QuantizedKvBlock {
  int64_t n_tokens = 0;
  std::vector<uint8_t> codes;    // F16: f16 [T, H, D]; INT8: int8 [T, H, D]; INT4: [T, H, D/2] bytes
  std::vector<uint16_t> scales;  // f16; empty for F16
  std::vector<uint16_t> mins;    // f16; INT4 only
};

// RoPE of the model, for decoding pre-RoPE keys: key of block token i is
// rotated for position first_position + i, pairs as in rope_rows (ops.h).
struct KvRopeParams {
  const float* inv_freq = nullptr;  // [n_rot / 2]
  int n_rot = 0;                    // even, <= head_dim
  bool neox = false;
  int64_t first_position = 0;
};

// Raw payload bytes for n_tokens of one K (is_key) or V block under `config`
// (the transform codec: the F16 size, 2 * n_tokens * kv_dim; its blocks are
// coded by kv_transform_codec.h, and the functions below refuse it).
uint64_t kv_block_raw_size(const KvCodecConfig& config, const KvGeometry& geometry, bool is_key,
                           int64_t n_tokens);
// Raw bytes per token of K and V together over all layers (per-channel key
// scales counted per token: group scales / group_size).
double kv_raw_bytes_per_token(const KvCodecConfig& config, const KvGeometry& geometry);

// Largest token count of one block.
constexpr int64_t kMaxKvBlockTokens = int64_t{1} << 20;

// data: f32 [n_tokens, n_head_kv, head_dim] row-major; keys post-RoPE, or
// pre-RoPE when config.pre_rope_keys. Values must be finite with |x| <= 65504
// (f16 range); InvalidArgument otherwise.
absl::StatusOr<EncodedKvBlock> encode_kv_block(const KvCodecConfig& config, const KvGeometry& geometry,
                                               bool is_key, const float* data, int64_t n_tokens);

// Quantizes without the byte layout and zstd (the store's form).
absl::StatusOr<QuantizedKvBlock> quantize_kv_block(const KvCodecConfig& config, const KvGeometry& geometry,
                                                   bool is_key, const float* data, int64_t n_tokens);
// Byte layout + zstd of a quantized block (e.g. a block exported by the store).
absl::StatusOr<EncodedKvBlock> encode_quantized_kv_block(const KvCodecConfig& config,
                                                         const KvGeometry& geometry, bool is_key,
                                                         const QuantizedKvBlock& block);

// Decodes to f32 [n_tokens, n_head_kv, head_dim]: dequantized, Hadamard
// rotated back, and for pre-RoPE keys rotated by RoPE (rope required then).
// Checks everything before touching `out`'s contents beyond its n_tokens rows:
// raw_size must equal kv_block_raw_size() before anything is decompressed, the
// zstd frame must declare exactly raw_size bytes and decode to exactly them,
// scales, minimums and F16 values must be finite. Errors: InvalidArgument
// naming the sizes or the bad field; nothing crashes on hostile bytes.
absl::Status decode_kv_block(const KvCodecConfig& config, const KvGeometry& geometry, bool is_key,
                             std::string_view payload, uint64_t raw_size, int64_t n_tokens, float* out,
                             const KvRopeParams* rope = nullptr);

// Decodes to the quantized form without dequantizing (same checks). Keys stay
// in the config's domain (pre-RoPE, Hadamard-rotated) as sent.
absl::StatusOr<QuantizedKvBlock> decode_kv_block_quantized(const KvCodecConfig& config,
                                                           const KvGeometry& geometry, bool is_key,
                                                           std::string_view payload, uint64_t raw_size,
                                                           int64_t n_tokens);

// Dequantizes a block in quantized form (no Hadamard / RoPE undo): out f32
// [n_tokens, n_head_kv, head_dim] in the block's domain.
absl::Status dequantize_kv_block(const KvCodecConfig& config, const KvGeometry& geometry, bool is_key,
                                 const QuantizedKvBlock& block, float* out);

}  // namespace baton
