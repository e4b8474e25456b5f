// EdgeRuntime: what one Generate turn needs from the agent: the loaded model
// and its engine, the stores, the cloud client and the measured figures.
// Built by EdgeService::Load; the pointers outlive every turn.
#pragma once

#include <string>

#include "common/engine/engine.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/tokenizer/tokenizer.h"
#include "edge_decode/generate/context_overflow.h"
#include "edge_decode/generate/decode_batcher.h"
#include "edge_decode/link/cloud_client.h"
#include "edge_decode/link/transform_coders.h"
#include "edge_decode/plan/codec_choice.h"
#include "edge_decode/plan/kv_admission.h"
#include "edge_decode/plan/memory_plan.h"
#include "edge_decode/store/pack_store.h"
#include "edge_decode/store/session_store.h"
#include "edge_decode/plan/split_policy.h"

namespace baton {

struct EdgeRuntime {
  const Model* model = nullptr;
  const Tokenizer* tokenizer = nullptr;
  Engine* engine = nullptr;               // never called by a turn: turns go through `batcher`
  // The one door to `engine` while turns run (several at once: --max-batch).
  DecodeBatcher* batcher = nullptr;
  // The KV budget shared by the running turns (their KV reservations).
  KvAdmission* kv_admission = nullptr;
  ModelFingerprint fingerprint;
  KvGeometry geometry;
  KvRope rope;
  EdgeMemoryPlan memory;
  KvCodecConfig default_codec;            // wire codec when a request leaves it unset (auto's fallback)
  bool auto_codec = false;                // a request that leaves it unset gets --codec auto
  double max_kv_loss_pct = kDefaultMaxKvLossPct;  // --codec auto's floor: perplexity change in percent
  PrefillPolicy default_policy = PrefillPolicy::kAuto;
  int default_max_tokens = 256;
  uint32_t max_tokens_cap = 4096;         // a request asking for more is INVALID_ARGUMENT
  float default_temperature = 0.8f;
  // A continuing session past its context limit, when a request leaves it
  // unset (--context-overflow, --keep-tokens; context_overflow.h).
  ContextOverflowMode context_overflow = ContextOverflowMode::kTruncate;
  uint32_t keep_tokens = 0;
  // Reply tokens the cloud samples ahead of the KV when a request leaves
  // GenerateRequest.early_tokens unset (--early-tokens); 0: none.
  uint32_t early_tokens = 0;
  // Most draft tokens per decode step when a request leaves
  // GenerateRequest.speculative unset (--speculative); 0: off.
  uint32_t speculative = 0;
  // --draft: a smaller model with the same tokenizer drafts where prompt
  // lookup finds nothing (draft_model.h); each decoding turn runs its own
  // engine on it with draft_threads threads. nullptr: prompt lookup alone.
  const Model* draft_model = nullptr;
  int draft_threads = 1;
  SessionStore* sessions = nullptr;
  PackStore* packs = nullptr;
  CloudClient* cloud = nullptr;           // nullptr: no cloud configured
  // The transform codec's calibration and coders (tc-* wire codecs).
  TransformCoders* transform = nullptr;
  // Local prefill speed for the split policy: measured at warm-up and after
  // each local prefill; `assumed_local_prefill_tokens_per_s` > 0 replaces it.
  MovingAverage* local_prefill_tokens_per_s = nullptr;
  double assumed_local_prefill_tokens_per_s = 0;
  double assumed_link_bytes_per_s = 0;     // > 0 replaces the measured link bandwidth (tests)
  MovingAverage* decode_tokens_per_s = nullptr;
};

}  // namespace baton
