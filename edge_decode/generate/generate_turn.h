// One Generate turn of the edge agent (DESIGN.md "The handoff"), run on the
// generation worker: validate, tokenize, take the session (continue, or
// create it, optionally from a prefix pack), check the memory plan, decide
// where to prefill [have, n-1), prefill it locally or through the cloud
// (falling back to local under policy AUTO), run the last prompt token
// locally (fresh logits), decode with the sampler streaming UTF-8-safe text
// pieces, and commit the session.
//
// A failed turn, or one cancelled before its first token (during
// tokenizing, prefill or the KV handoff), leaves the session exactly as it
// was (its KV size and tokens are rolled back and it is released unsaved; a
// new session is abandoned). A completed turn is committed and saved once
// its last text is queued for the client, before the Stats (the Generate
// stream buffers a whole turn, so a client that reads slowly still gets its
// turn committed). A turn whose client leaves (cancels) after its first
// token is committed too, with the answer generated so far: the prompt and
// those tokens, KV included, so the next turn continues from what the user
// saw (plus at most the pieces still in flight when the cancel arrived); the
// call still ends CANCELLED. max_tokens past the context limit
// (common/engine/context_limit.h) is clamped, with a `warning` event first.
//
// max_tokens above EdgeRuntime::max_tokens_cap, more than kMaxStopStrings
// stop strings or one longer than kMaxStopStringBytes: INVALID_ARGUMENT.
#pragma once

#include <chrono>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/engine/sampler.h"
#include "common/engine/sampling_proto.h"  // sampling_params_from_proto
#include "common/rpc/cancel_slot.h"
#include "edge_decode/edge_runtime.h"
#include "proto/baton.pb.h"

namespace baton {

struct TurnIo {
  // Sends one event to the client; CANCELLED once the client is gone.
  std::function<absl::Status(v1::GenerateResponse)> emit;
  // True once the client is gone (polled between steps).
  std::function<bool()> cancelled;
  // Optional: stops blocking work (a cloud stream) the moment the client goes.
  CancelSlot* cancel_slot = nullptr;
  std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max();
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
};

// Runs the turn; the Stats message is the last event of a successful turn.
// Errors carry the gRPC-mapped code (INVALID_ARGUMENT, NOT_FOUND,
// RESOURCE_EXHAUSTED, FAILED_PRECONDITION, UNAVAILABLE, CANCELLED,
// DEADLINE_EXCEEDED).
absl::Status run_generate_turn(const EdgeRuntime& runtime, const v1::GenerateRequest& request, const TurnIo& io);

// The wire codec of a request: unset (UNSPECIFIED) -> `fallback`; else the
// default variant of that width (default_kv_codec_config) with every set
// field applied, validated against `geometry` (INVALID_ARGUMENT).
// KV_CODEC_TC: kv_transform_request_config (the cloud reads a request the
// same way), bound when the params name a calibration
// (TransformCoders::coder_for checks it is the edge's).
absl::StatusOr<KvCodecConfig> resolve_wire_codec(const v1::CodecParams& params, const KvCodecConfig& fallback,
                                                 const KvGeometry& geometry);

}  // namespace baton
