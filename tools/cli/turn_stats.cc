#include "turn_stats.h"

#include "absl/strings/str_format.h"
#include "common/util/format_bytes.h"
#include "edge_decode/plan/split_policy.h"
#include "report.h"

namespace baton::cli {

const char* finish_name(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_EOS: return "end of sequence";
    case v1::FINISH_REASON_STOP: return "stop string";
    case v1::FINISH_REASON_LENGTH: return "max tokens";
    case v1::FINISH_REASON_CONTEXT_FULL: return "context full";
    default: return "unknown";
  }
}

void print_turn_stats(const std::string& address, const v1::Stats& stats, std::FILE* out, bool interrupted) {
  // Two literal formats, not one chosen at run time: clang checks them at compile time.
  Report r(interrupted ? absl::StrFormat("stats (edge %s; interrupted: as seen by this client)", address)
                       : absl::StrFormat("stats (edge %s)", address));
  r.add_text("place", "prefill place", std::string(prefill_place_name(stats.plan().place())));
  if (stats.plan().place() == v1::PREFILL_PLACE_OVERLAP) {
    r.add_int("split_position", "  split position", stats.plan().split_position());
    r.add("overlap_local_prefill_ms", "  edge part (beside the cloud)", stats.overlap_local_prefill_ms(), "ms", 1);
  }
  if (!stats.plan().reason().empty()) r.add_text("reason", "plan reason", stats.plan().reason());
  if (!stats.fallback_reason().empty()) r.add_text("fallback", "fallback reason", stats.fallback_reason());
  if (!stats.save_error().empty()) r.add_text("save_error", "session NOT saved", stats.save_error());
  r.add("ttft_ms", "time to first token", stats.ttft_ms(), "ms", 1);
  // Early tokens: the first ones came from the cloud before the KV landed.
  if (stats.early_tokens() > 0) {
    r.add("cloud_first_token_ms", "  first token from the cloud", stats.cloud_first_token_ms(), "ms", 1);
    if (stats.local_first_token_ms() > 0) {
      r.add("local_first_token_ms", "  first token decoded here", stats.local_first_token_ms(), "ms", 1);
    } else {
      r.add_text("local_first_token_ms", "  first token decoded here", "none (the reply ended among the early tokens)");
    }
    r.add_int("early_tokens", "  early tokens (cloud)", stats.early_tokens());
  }
  // Speculative decoding: draft tokens that became reply tokens without a
  // decode step of their own.
  if (stats.speculative_drafted() > 0) {
    r.add_text("speculative", "draft tokens taken",
               absl::StrFormat("%u of %u drafted (%.0f%%)", stats.speculative_accepted(), stats.speculative_drafted(),
                               100.0 * stats.speculative_accepted() / stats.speculative_drafted()));
  }
  if (!stats.early_tokens_note().empty()) r.add_text("early_tokens_note", "early tokens", stats.early_tokens_note());
  // The cloud's part only when the cloud served the turn (a KV stream
  // arrived): a local turn has no cloud time to show, not 0 ms of it.
  const bool cloud_served = stats.kv_wire_bytes() > 0;
  if (cloud_served) {
    r.add("cloud_prefill_ms", "  cloud prefill", stats.cloud_prefill_ms(), "ms", 1);
    r.add("transfer_ms", "  KV transfer", stats.transfer_ms(), "ms", 1);
    r.add("ingest_ms", "  KV ingest", stats.ingest_ms(), "ms", 1);
  }
  if (!interrupted) r.add("local_ms", "  local", stats.local_ms(), "ms", 1);
  if (cloud_served) {
    r.add_text("kv_raw", "KV raw (f16)", format_bytes(stats.kv_raw_bytes()));
    r.add_text("kv_quantized", "KV quantized", format_bytes(stats.kv_quantized_bytes()));
    r.add_text("kv_wire", "KV on the wire", format_bytes(stats.kv_wire_bytes()));
    if (!stats.kv_codec().empty()) r.add_text("kv_codec", "KV codec (wire)", stats.kv_codec());
  }
  if (stats.decode_tokens_per_s() > 0) {
    r.add("decode_tok_per_s", "decode (mean)", stats.decode_tokens_per_s(), "tok/s", 1);
  } else {
    r.add_text("decode_tok_per_s", "decode (mean)", "not measured (fewer than 2 tokens generated)");
  }
  if (!interrupted) r.add_int("prompt_tokens", "prompt tokens", stats.prompt_tokens());
  r.add_int("reused_tokens", "reused tokens (edge)", stats.plan().reused_tokens());
  if (cloud_served) r.add_int("cloud_reused_tokens", "reused tokens (cloud cache)", stats.cloud_reused_tokens());
  r.add_int("generated_tokens", "generated tokens", stats.generated_tokens());
  r.add_int("context_tokens", "context tokens", stats.context_tokens());
  if (!stats.context_warning().empty()) r.add_text("context_warning", "context", stats.context_warning());
  if (!stats.context_overflow().empty()) r.add_text("context_overflow", "context overflow", stats.context_overflow());
  r.add_text("finish", "finish",
             interrupted ? "interrupted (Ctrl-C); the session keeps the answer so far"
                         : std::string(finish_name(stats.finish_reason())));
  r.add("total_ms", "total", stats.total_ms(), "ms", 1);
  if (!stats.session_id().empty()) r.add_text("session", "session", stats.session_id());
  r.print_table(out);
}

}  // namespace baton::cli
