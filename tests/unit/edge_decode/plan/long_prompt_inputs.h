// The split-policy tests' common case: 8000 new tokens after 100 held; a
// laptop at 80 tok/s (100 s) vs a GPU at 10k tok/s, 30 KiB per token, RTT
// 20 ms, over a link of `link_bytes_per_s` (100 MB/s: ~2.5 s in the cloud).
#pragma once

#include "edge_decode/plan/split_policy.h"

namespace baton::testing {

inline SplitInputs long_prompt_inputs(double link_bytes_per_s = 100e6) {
  SplitInputs in;
  in.policy = PrefillPolicy::kAuto;
  in.cloud_configured = true;
  in.cloud_reachable = true;
  in.reused_tokens = 100;
  in.prefill_tokens = 8000;
  in.local_prefill_tokens_per_s = 80;
  in.cloud_prefill_tokens_per_s = 10000;
  in.link_bytes_per_s = link_bytes_per_s;
  in.link_rtt_ms = 20;
  in.wire_bytes_per_token = 30 * 1024;
  return in;
}

}  // namespace baton::testing
