#include "common/kv_codec/kv_codec.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_format.h"
#include "common/cpu/ops.h"
#include "common/kv_codec/kv_quant.h"
#include "common/kv_codec/kv_zstd.h"

namespace baton {
namespace {

using Bits = KvCodecConfig::Bits;
using Layout = KvCodecConfig::Layout;

// Sizes of one block in quantized form.
struct BlockShape {
  Bits bits;
  int64_t n_tokens;
  int64_t width;        // n_head_kv * head_dim: elements per token
  int group;            // the kind's group size (quantized)
  bool per_channel;     // key groups over tokens
  int64_t code_bytes;   // F16 2*T*W, INT8 T*W, INT4 T*W/2
  int64_t n_groups;     // scales (and mins for INT4)
  int64_t raw_bytes() const { return code_bytes + 2 * n_groups * (bits == Bits::kInt4 ? 2 : 1); }
  int64_t token_groups() const { return (n_tokens + group - 1) / group; }  // per-channel
  int64_t row_code_bytes() const { return code_bytes / n_tokens; }
};

BlockShape block_shape(const KvCodecConfig& c, const KvGeometry& g, bool is_key, int64_t n_tokens) {
  BlockShape s;
  s.bits = c.bits_for(is_key);
  s.n_tokens = n_tokens;
  s.width = g.kv_dim();
  s.group = c.group_size_for(is_key);
  s.per_channel = is_key && c.quantized() && c.key_axis == KvCodecConfig::KeyAxis::kPerChannel;
  const int64_t elements = n_tokens * s.width;
  switch (s.bits) {
    case Bits::kF16:
      s.code_bytes = 2 * elements;
      s.n_groups = 0;
      break;
    case Bits::kInt8:
      s.code_bytes = elements;
      break;
    case Bits::kInt4:
      s.code_bytes = elements / 2;
      break;
  }
  if (c.quantized()) s.n_groups = s.per_channel ? s.token_groups() * s.width : elements / s.group;
  return s;
}

absl::Status check_block_args(const KvCodecConfig& config, const KvGeometry& geometry, int64_t n_tokens) {
  if (absl::Status st = config.validate(geometry); !st.ok()) return st;
  if (config.transform) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV codec %s is the transform codec: it codes blocks with its calibration (kv_transform_codec.h)",
        config.to_string()));
  }
  if (n_tokens < 1 || n_tokens > kMaxKvBlockTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV block of %d tokens; a block holds 1..%d tokens", n_tokens, kMaxKvBlockTokens));
  }
  return absl::OkStatus();
}

bool hadamard_for(const KvCodecConfig& c, bool is_key) { return is_key ? c.hadamard_keys : c.hadamard_values; }

// --- byte layouts ---------------------------------------------------------

// Writes n f16 as a low-byte plane then a high-byte plane.
void put_f16_planes(const uint16_t* x, int64_t n, uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<uint8_t>(x[i]);
    out[n + i] = static_cast<uint8_t>(x[i] >> 8);
  }
}

void get_f16_planes(const uint8_t* in, int64_t n, uint16_t* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<uint16_t>(in[i] | (in[n + i] << 8));
}

void put_f16(uint16_t v, uint8_t* out) {
  out[0] = static_cast<uint8_t>(v);
  out[1] = static_cast<uint8_t>(v >> 8);
}

uint16_t get_f16(const uint8_t* in) { return static_cast<uint16_t>(in[0] | (in[1] << 8)); }

// The rows layout walks the block in records; `to_raw` picks the direction.
void walk_rows(const BlockShape& s, bool to_raw, QuantizedKvBlock& b, uint8_t* raw) {
  const bool int4 = s.bits == Bits::kInt4;
  uint8_t* p = raw;
  auto move_bytes = [&](uint8_t* block_bytes, int64_t n) {
    if (to_raw) {
      std::memcpy(p, block_bytes, n);
    } else {
      std::memcpy(block_bytes, p, n);
    }
    p += n;
  };
  auto move_f16 = [&](uint16_t& v) {
    if (to_raw) {
      put_f16(v, p);
    } else {
      v = get_f16(p);
    }
    p += 2;
  };
  if (s.per_channel) {
    for (int64_t j = 0; j < s.token_groups(); ++j) {
      const int64_t t0 = j * s.group;
      const int64_t len = std::min<int64_t>(s.group, s.n_tokens - t0);
      for (int64_t c = 0; c < s.width; ++c) move_f16(b.scales[j * s.width + c]);
      if (int4) {
        for (int64_t c = 0; c < s.width; ++c) move_f16(b.mins[j * s.width + c]);
      }
      move_bytes(b.codes.data() + t0 * s.row_code_bytes(), len * s.row_code_bytes());
    }
    return;
  }
  const int64_t group_code_bytes = int4 ? s.group / 2 : s.group;
  for (int64_t g = 0; g < s.n_groups; ++g) {
    move_f16(b.scales[g]);
    if (int4) move_f16(b.mins[g]);
    move_bytes(b.codes.data() + g * group_code_bytes, group_code_bytes);
  }
}

// The raw payload of `block` into `raw` (resized to s.raw_bytes(); every
// byte written).
void serialize_into(const KvCodecConfig& c, const BlockShape& s, const QuantizedKvBlock& block, std::string& raw) {
  raw.resize(static_cast<size_t>(s.raw_bytes()));
  uint8_t* out = reinterpret_cast<uint8_t*>(raw.data());
  if (s.bits == Bits::kF16) {
    if (c.layout == Layout::kPlanes) {
      put_f16_planes(reinterpret_cast<const uint16_t*>(block.codes.data()), s.code_bytes / 2, out);
    } else {
      std::memcpy(out, block.codes.data(), s.code_bytes);
    }
    return;
  }
  if (c.layout == Layout::kRows) {
    walk_rows(s, /*to_raw=*/true, const_cast<QuantizedKvBlock&>(block), out);  // reads block only
    return;
  }
  std::memcpy(out, block.codes.data(), s.code_bytes);
  out += s.code_bytes;
  put_f16_planes(block.scales.data(), s.n_groups, out);
  if (s.bits == Bits::kInt4) put_f16_planes(block.mins.data(), s.n_groups, out + 2 * s.n_groups);
}

void resize_block(const BlockShape& s, QuantizedKvBlock& b) {
  b.n_tokens = s.n_tokens;
  b.codes.resize(static_cast<size_t>(s.code_bytes));
  b.scales.resize(static_cast<size_t>(s.n_groups));
  b.mins.resize(static_cast<size_t>(s.bits == Bits::kInt4 ? s.n_groups : 0));
}

// A block in quantized form, pointing into the raw payload where the layout
// allows (planes: the codes) and into a scratch block for the rest.
struct BlockView {
  const uint8_t* codes;
  const uint16_t* scales;
  const uint16_t* mins;  // INT4 only
};

BlockView view_of(const QuantizedKvBlock& b) { return {b.codes.data(), b.scales.data(), b.mins.data()}; }

// raw: exactly s.raw_bytes() bytes. Checks the f16 fields are finite.
absl::StatusOr<BlockView> read_raw(const KvCodecConfig& c, const BlockShape& s, const uint8_t* raw,
                                   QuantizedKvBlock& scratch) {
  BlockView view{};
  if (s.bits == Bits::kF16) {
    if (c.layout == Layout::kPlanes) {
      scratch.codes.resize(static_cast<size_t>(s.code_bytes));
      get_f16_planes(raw, s.code_bytes / 2, reinterpret_cast<uint16_t*>(scratch.codes.data()));
      view.codes = scratch.codes.data();
    } else {
      view.codes = raw;
    }
    // Checked on a copy-free path too: uint16 loads of raw bytes.
    std::vector<uint16_t> values;
    const uint16_t* halves = reinterpret_cast<const uint16_t*>(view.codes);
    if (reinterpret_cast<uintptr_t>(view.codes) % alignof(uint16_t) != 0) {
      values.resize(static_cast<size_t>(s.code_bytes / 2));
      std::memcpy(values.data(), view.codes, s.code_bytes);
      halves = values.data();
    }
    if (!kv_quant::all_f16_finite(halves, s.code_bytes / 2)) {
      return absl::InvalidArgumentError("KV block: f16 values hold Inf or NaN");
    }
    return view;
  }
  const bool int4 = s.bits == Bits::kInt4;
  scratch.n_tokens = s.n_tokens;
  scratch.scales.resize(static_cast<size_t>(s.n_groups));
  scratch.mins.resize(static_cast<size_t>(int4 ? s.n_groups : 0));
  if (c.layout == Layout::kRows) {
    scratch.codes.resize(static_cast<size_t>(s.code_bytes));
    walk_rows(s, /*to_raw=*/false, scratch, const_cast<uint8_t*>(raw));  // reads raw only
    view.codes = scratch.codes.data();
  } else {
    view.codes = raw;
    get_f16_planes(raw + s.code_bytes, s.n_groups, scratch.scales.data());
    if (int4) get_f16_planes(raw + s.code_bytes + 2 * s.n_groups, s.n_groups, scratch.mins.data());
  }
  view.scales = scratch.scales.data();
  view.mins = int4 ? scratch.mins.data() : nullptr;
  if (!kv_quant::all_f16_finite(view.scales, s.n_groups)) {
    return absl::InvalidArgumentError("KV block: f16 scales hold Inf or NaN");
  }
  if (int4 && !kv_quant::all_f16_finite(view.mins, s.n_groups)) {
    return absl::InvalidArgumentError("KV block: f16 minimums hold Inf or NaN");
  }
  return view;
}

absl::Status check_values(const float* data, int64_t n) {
  // On the bits, which the compiler vectorizes (the float compare it did
  // not: it cost 2.5x the INT8 quantization itself): a float's magnitude
  // bits order like its magnitude, and NaN's and infinity's exceed every
  // finite one's.
  constexpr int32_t kMaxBits = std::bit_cast<int32_t>(kv_quant::kMaxAbsValue);
  int32_t over = 0;
  for (int64_t i = 0; i < n; ++i) {
    int32_t bits;
    std::memcpy(&bits, data + i, sizeof(bits));
    over |= static_cast<int32_t>((bits & 0x7fffffff) > kMaxBits);
  }
  if (over == 0) return absl::OkStatus();
  for (int64_t i = 0; i < n; ++i) {
    if (!(std::fabs(data[i]) <= kv_quant::kMaxAbsValue)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "KV value %g at element %d is not finite or exceeds the f16 range (|x| <= 65504)", data[i], i));
    }
  }
  return absl::OkStatus();
}

void dequantize(const BlockShape& s, const BlockView& b, float* out) {
  const int64_t elements = s.n_tokens * s.width;
  if (s.bits == Bits::kF16) {
    kv_quant::f16_to_f32(reinterpret_cast<const uint16_t*>(b.codes), out, elements);
    return;
  }
  const bool int4 = s.bits == Bits::kInt4;
  if (!s.per_channel) {
    if (int4) {
      kv_quant::dequantize_int4_groups(b.codes, b.scales, b.mins, elements, s.group, out);
    } else {
      kv_quant::dequantize_int8_groups(reinterpret_cast<const int8_t*>(b.codes), b.scales, elements, s.group, out);
    }
    return;
  }
  for (int64_t j = 0; j < s.token_groups(); ++j) {
    const int64_t t0 = j * s.group;
    const int64_t len = std::min<int64_t>(s.group, s.n_tokens - t0);
    const uint8_t* codes = b.codes + t0 * s.row_code_bytes();
    if (int4) {
      kv_quant::dequantize_int4_channels(codes, b.scales + j * s.width, b.mins + j * s.width, len, s.width,
                                         out + t0 * s.width);
    } else {
      kv_quant::dequantize_int8_channels(reinterpret_cast<const int8_t*>(codes), b.scales + j * s.width, len,
                                         s.width, out + t0 * s.width);
    }
  }
}

absl::Status check_block_shape(const BlockShape& s, const QuantizedKvBlock& b) {
  if (b.n_tokens != s.n_tokens || static_cast<int64_t>(b.codes.size()) != s.code_bytes ||
      static_cast<int64_t>(b.scales.size()) != s.n_groups ||
      static_cast<int64_t>(b.mins.size()) != (s.bits == Bits::kInt4 ? s.n_groups : 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "quantized KV block has %d tokens, %d code bytes, %d scales, %d mins; expected %d, %d, %d, %d",
        b.n_tokens, b.codes.size(), b.scales.size(), b.mins.size(), s.n_tokens, s.code_bytes, s.n_groups,
        s.bits == Bits::kInt4 ? s.n_groups : 0));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t kv_block_raw_size(const KvCodecConfig& config, const KvGeometry& geometry, bool is_key,
                           int64_t n_tokens) {
  // The transform codec's raw size is the F16 size of what it carries.
  if (config.transform) return static_cast<uint64_t>(2 * n_tokens * geometry.kv_dim());
  return static_cast<uint64_t>(block_shape(config, geometry, is_key, n_tokens).raw_bytes());
}

double kv_raw_bytes_per_token(const KvCodecConfig& config, const KvGeometry& geometry) {
  const double elements = static_cast<double>(geometry.kv_dim());
  if (config.transform) return 4.0 * elements * geometry.n_layer;  // F16 K and V (kv_block_raw_size)
  double per_token = 0;
  for (bool is_key : {true, false}) {
    double code = 0, scale_bytes = 0;
    switch (config.bits_for(is_key)) {
      case Bits::kF16:
        code = 2;
        break;
      case Bits::kInt8:
        code = 1;
        scale_bytes = 2;
        break;
      case Bits::kInt4:
        code = 0.5;
        scale_bytes = 4;
        break;
    }
    // One scale record per group elements (per-token groups) or per group
    // tokens per channel (per-channel keys): scale_bytes / group per element.
    per_token += elements * (code + (scale_bytes > 0 ? scale_bytes / config.group_size_for(is_key) : 0.0));
  }
  return per_token * geometry.n_layer;
}

namespace {

// quantize_kv_block into `b` (its buffers reused: a thread's encoder keeps
// one, so a block costs no allocation and no fresh pages).
absl::Status quantize_kv_block_into(const KvCodecConfig& config, const KvGeometry& geometry, bool is_key,
                                    const float* data, int64_t n_tokens, QuantizedKvBlock& b) {
  if (absl::Status st = check_block_args(config, geometry, n_tokens); !st.ok()) return st;
  const BlockShape s = block_shape(config, geometry, is_key, n_tokens);
  const int64_t elements = n_tokens * s.width;
  if (absl::Status st = check_values(data, elements); !st.ok()) return st;
  std::vector<float> rotated;
  if (hadamard_for(config, is_key)) {
    rotated.assign(data, data + elements);
    kv_quant::hadamard_rows(rotated.data(), n_tokens * geometry.n_head_kv, geometry.head_dim);
    data = rotated.data();
  }
  resize_block(s, b);
  const bool int4 = s.bits == Bits::kInt4;
  if (s.bits == Bits::kF16) {
    kv_quant::f32_to_f16(data, reinterpret_cast<uint16_t*>(b.codes.data()), elements);
  } else if (!s.per_channel) {
    if (int4) {
      kv_quant::quantize_int4_groups(data, elements, s.group, b.codes.data(), b.scales.data(), b.mins.data());
    } else {
      kv_quant::quantize_int8_groups(data, elements, s.group, reinterpret_cast<int8_t*>(b.codes.data()),
                                     b.scales.data());
    }
  } else {
    for (int64_t j = 0; j < s.token_groups(); ++j) {
      const int64_t t0 = j * s.group;
      const int64_t len = std::min<int64_t>(s.group, n_tokens - t0);
      uint8_t* codes = b.codes.data() + t0 * s.row_code_bytes();
      if (int4) {
        kv_quant::quantize_int4_channels(data + t0 * s.width, len, s.width, codes, b.scales.data() + j * s.width,
                                         b.mins.data() + j * s.width);
      } else {
        kv_quant::quantize_int8_channels(data + t0 * s.width, len, s.width, reinterpret_cast<int8_t*>(codes),
                                         b.scales.data() + j * s.width);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<QuantizedKvBlock> quantize_kv_block(const KvCodecConfig& config, const KvGeometry& geometry,
                                                   bool is_key, const float* data, int64_t n_tokens) {
  QuantizedKvBlock b;
  if (absl::Status st = quantize_kv_block_into(config, geometry, is_key, data, n_tokens, b); !st.ok()) return st;
  return b;
}

absl::StatusOr<EncodedKvBlock> encode_quantized_kv_block(const KvCodecConfig& config,
                                                         const KvGeometry& geometry, bool is_key,
                                                         const QuantizedKvBlock& block) {
  if (absl::Status st = check_block_args(config, geometry, block.n_tokens); !st.ok()) return st;
  const BlockShape s = block_shape(config, geometry, is_key, block.n_tokens);
  if (absl::Status st = check_block_shape(s, block); !st.ok()) return st;
  EncodedKvBlock encoded;
  encoded.raw_size = static_cast<uint64_t>(s.raw_bytes());
  if (config.zstd_level == 0) {
    serialize_into(config, s, block, encoded.payload);
  } else {
    thread_local std::string raw;  // zstd's input only: reused
    serialize_into(config, s, block, raw);
    absl::StatusOr<std::string> compressed = zstd_compress(raw, config.zstd_level);
    if (!compressed.ok()) return compressed.status();
    encoded.payload = std::move(*compressed);
  }
  return encoded;
}

absl::StatusOr<EncodedKvBlock> encode_kv_block(const KvCodecConfig& config, const KvGeometry& geometry,
                                               bool is_key, const float* data, int64_t n_tokens) {
  thread_local QuantizedKvBlock block;  // reused: no allocation per block
  if (absl::Status st = quantize_kv_block_into(config, geometry, is_key, data, n_tokens, block); !st.ok()) return st;
  return encode_quantized_kv_block(config, geometry, is_key, block);
}

namespace {

// Checks raw_size and the payload, decompresses into a per-thread buffer and
// reads the layout. The view stays valid until the thread's next decode.
absl::StatusOr<BlockView> decode_view(const KvCodecConfig& config, const KvGeometry& geometry, bool is_key,
                                      std::string_view payload, uint64_t raw_size, int64_t n_tokens,
                                      QuantizedKvBlock& scratch) {
  if (absl::Status st = check_block_args(config, geometry, n_tokens); !st.ok()) return st;
  const BlockShape s = block_shape(config, geometry, is_key, n_tokens);
  const uint64_t expected = static_cast<uint64_t>(s.raw_bytes());
  if (raw_size != expected) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV block raw_size is %d bytes; %d %s tokens of codec %s take %d bytes", raw_size,
                        n_tokens, is_key ? "key" : "value", config.to_string(), expected));
  }
  if (config.zstd_level == 0) {
    if (payload.size() != raw_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "KV block payload is %d bytes; uncompressed codec %s needs raw_size %d", payload.size(),
          config.to_string(), raw_size));
    }
    return read_raw(config, s, reinterpret_cast<const uint8_t*>(payload.data()), scratch);
  }
  // Bounded by the expected size checked above: never more than raw_size.
  thread_local std::vector<uint8_t> raw;
  raw.resize(raw_size);
  if (absl::Status st = zstd_decompress_exact(payload, raw_size, raw.data()); !st.ok()) return st;
  return read_raw(config, s, raw.data(), scratch);
}

}  // namespace

absl::StatusOr<QuantizedKvBlock> decode_kv_block_quantized(const KvCodecConfig& config,
                                                           const KvGeometry& geometry, bool is_key,
                                                           std::string_view payload, uint64_t raw_size,
                                                           int64_t n_tokens) {
  QuantizedKvBlock block;
  absl::StatusOr<BlockView> view = decode_view(config, geometry, is_key, payload, raw_size, n_tokens, block);
  if (!view.ok()) return view.status();
  const BlockShape s = block_shape(config, geometry, is_key, n_tokens);
  block.n_tokens = n_tokens;
  if (view->codes != block.codes.data()) block.codes.assign(view->codes, view->codes + s.code_bytes);
  return block;
}

absl::Status dequantize_kv_block(const KvCodecConfig& config, const KvGeometry& geometry, bool is_key,
                                 const QuantizedKvBlock& block, float* out) {
  if (absl::Status st = check_block_args(config, geometry, block.n_tokens); !st.ok()) return st;
  const BlockShape s = block_shape(config, geometry, is_key, block.n_tokens);
  if (absl::Status st = check_block_shape(s, block); !st.ok()) return st;
  dequantize(s, view_of(block), out);
  return absl::OkStatus();
}

absl::Status decode_kv_block(const KvCodecConfig& config, const KvGeometry& geometry, bool is_key,
                             std::string_view payload, uint64_t raw_size, int64_t n_tokens, float* out,
                             const KvRopeParams* rope) {
  const bool apply_rope = is_key && config.pre_rope_keys;
  if (apply_rope) {
    if (rope == nullptr || rope->inv_freq == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "KV codec %s: pre-RoPE keys need the model's RoPE parameters to decode", config.to_string()));
    }
    if (rope->n_rot < 2 || rope->n_rot % 2 != 0 || rope->n_rot > geometry.head_dim || rope->first_position < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "KV decode: bad RoPE parameters (n_rot %d, head_dim %d, first position %d)", rope->n_rot,
          geometry.head_dim, rope->first_position));
    }
  }
  thread_local QuantizedKvBlock scratch;
  absl::StatusOr<BlockView> view = decode_view(config, geometry, is_key, payload, raw_size, n_tokens, scratch);
  if (!view.ok()) return view.status();
  dequantize(block_shape(config, geometry, is_key, n_tokens), *view, out);
  if (hadamard_for(config, is_key)) kv_quant::hadamard_rows(out, n_tokens * geometry.n_head_kv, geometry.head_dim);
  if (apply_rope) {
    rope_rows(out, n_tokens, geometry.n_head_kv, geometry.head_dim, rope->n_rot, rope->neox,
              rope->first_position, rope->inv_freq);
  }
  return absl::OkStatus();
}

}  // namespace baton
