// The KV codec on the wire: conversion between the proto's CodecParams (what a
// KvHeader declares, what the fingerprint digests) and KvCodecConfig (what
// the codec in kv_codec.h runs), and the codec hooks a KvStreamReader takes
// (kv_stream.h: exact raw sizes, a trial decode of each payload).
//
// The two describe the same codec except for what the proto cannot say:
// CodecParams has no layout field, so a stream's payloads are always in the
// "planes" layout and a "rows" config is rejected (kv_codec.h says why planes
// won); it has one codec and one group size for K and V, so mixed precision
// (e.g. int4-k8) and a separate key group (kgN) are rejected too until the
// proto carries them. For F16 the proto carries group_size 0 and key_axis unspecified (the
// fingerprint ignores both); the config gets the defaults back.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_codec/kv_geometry.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_stream.h"
#include "common/kv_stream/kv_stream_reader.h"
#include "proto/baton.pb.h"

namespace baton {

// Every field set, as a KvHeader needs it (zstd_level present, 0 when
// uncompressed). INVALID_ARGUMENT for a config that fails validate(), uses
// the rows layout, or differs between K and V in bits or group size.
absl::StatusOr<v1::CodecParams> kv_codec_params(const KvCodecConfig& config);

// The same for a request (GenerateRequest.codec): a transform config need
// not be bound yet, and an unbound one goes without calibration_sha256 (the
// receiver binds it to its own calibration).
absl::StatusOr<v1::CodecParams> kv_codec_request_params(const KvCodecConfig& config);

// A request's transform codec (KV_CODEC_TC), as both ends read it: unset
// fields take KvTransformParams' defaults (no transform message: all of
// them; budget_tenths 0: the default budget), the keys are pre-RoPE, the
// back end rANS unless zstd_level is set. Bound to the request's
// calibration_sha256 when it names one, else unbound (the receiver binds its
// own). INVALID_ARGUMENT for a calibration_sha256 that is not 32 bytes or a
// config that fails validate(geometry).
absl::StatusOr<KvCodecConfig> kv_transform_request_config(const v1::CodecParams& params, const KvGeometry& geometry);

// The config a complete CodecParams (a KvHeader's) describes, validated on
// its own (validate(); check the geometry with validate(geometry)).
// INVALID_ARGUMENT naming the field for an unspecified or unknown codec, a
// quantized codec without group_size or key_axis, or no zstd_level. Request
// defaults (unset fields) are the server's to fill first.
absl::StatusOr<KvCodecConfig> kv_codec_config_from_params(const v1::CodecParams& params);

// Exact KvBlock.raw_size for a model of `geometry`: kv_block_raw_size() of
// the block's codec, kind and token count. Errors for a codec that does not
// convert or does not fit the geometry (e.g. a group that does not divide
// head_dim).
KvExpectedRawSizeFn kv_expected_raw_size_fn(const KvGeometry& geometry);

// Trial decode of a payload to the quantized form (decode_kv_block_quantized:
// zstd frame size, decompressed size, finite scales / minimums / F16 values),
// without dequantizing. Costs one decompression per block (zstd decodes at
// GB/s, small next to the link); it lets a receiver reject a bad block while
// the stream is still arriving instead of after its trailer.
KvPayloadCheckFn kv_trial_decode_fn(const KvGeometry& geometry);

// Bytes the segment a (verified) header declares takes as the codec's raw
// form: token_count x kv_raw_bytes_per_token of its codec for `geometry`,
// rounded up. What a receiver checks against its caps before any block.
absl::StatusOr<uint64_t> kv_header_raw_bytes(const v1::KvHeader& header, const KvGeometry& geometry);

// Reader options with the codec hooks for `geometry` filled in:
// expected_raw_size always, check_payload when `trial_decode`. Limits and a
// block_rule already in `options` are kept.
KvStreamReaderOptions kv_reader_options_with_codec(const KvGeometry& geometry, KvStreamReaderOptions options = {},
                                                   bool trial_decode = true);

}  // namespace baton
