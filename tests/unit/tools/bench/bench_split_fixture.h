// The measured length and the links that bench split's model tests share
// (bench_split_overlap_test.cc, bench_split_early_test.cc).
#pragma once

#include "bench_split.h"

namespace baton::cli::testing {

// 512 tokens to prefill: the edge at 512 tok/s (1 s), the cloud's work 50 ms
// (first block at 10 ms), 1000 wire bytes per token; ingest 2 ms, the last
// token 5 ms.
inline LengthResult measured_length() {
  LengthResult r;
  r.prompt_len = 513;
  r.local_prefill_ms = 1000;
  r.local_last_token_ms = 5;
  r.local_ttft_ms = 1005;
  r.cloud_ms = 50;
  r.first_block_ms = 10;
  r.ingest_ms = 2;
  r.split_last_token_ms = 5;
  r.wire_bytes = 512 * 1000;
  return r;
}

inline WanProfile test_link(double bytes_per_s, double rtt_ms, double loss = 0) {
  WanProfile profile;
  profile.name = "test";
  profile.bandwidth_bytes_per_s = bytes_per_s;
  profile.rtt_ms = rtt_ms;
  profile.loss = loss;
  return profile;
}

}  // namespace baton::cli::testing
