// Context overflow (README "Context limits"): what a turn of a session does
// when the conversation, with room for the reply, no longer fits its context
// limit (the model's trained context or the KV budget for the session's
// codec, whichever is smaller).
//   refuse    the turn is refused with the numbers (check_context_fits);
//   truncate  the kept prefix (the pack, and at least the first keep_tokens
//             tokens; a leading BOS always) stays, then as many of the most
//             recent whole turns as fit with room for the reply; the turns
//             between are dropped, and the kept tail is prefilled again at
//             its new positions (generate_turn.cc), so the KV is exactly that
//             of the shortened conversation;
//   shift     the same turns are dropped, but the kept tail's cells move to
//             their new positions without recomputation (llama.cpp's context
//             shift): keys are re-rotated by RoPE, values copied. Cheaper,
//             approximate (the kept cells still carry what the dropped turns
//             contributed to them).
// This file holds the choice of what to drop (a pure function of the token
// and turn counts, unit-tested), the copy of the kept prefix's KV into the
// new store and the shift of the kept tail; GenerateTurn does the rest.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/kv_stream/kv_handoff.h"
#include "edge_decode/store/session.h"
#include "proto/baton.pb.h"

namespace baton {

enum class ContextOverflowMode { kRefuse, kTruncate, kShift };

// "refuse" | "truncate" | "shift"; INVALID_ARGUMENT naming the choices otherwise.
absl::StatusOr<ContextOverflowMode> parse_context_overflow(const std::string& name);
const char* context_overflow_name(ContextOverflowMode mode);
// UNSPECIFIED -> `fallback` (the agent's --context-overflow); an unknown
// value is INVALID_ARGUMENT naming it.
absl::StatusOr<ContextOverflowMode> context_overflow_from_proto(v1::ContextOverflow value,
                                                                ContextOverflowMode fallback);
v1::ContextOverflow context_overflow_to_proto(ContextOverflowMode mode);
// Largest keep_tokens a request or --keep-tokens may give.
inline constexpr uint32_t kMaxKeepTokens = 1'000'000;

struct TruncationInputs {
  int64_t held_tokens = 0;             // the session's tokens before this turn's prompt
  std::span<const SessionTurn> turns;  // the session's turn records (first_token ascending, < held_tokens)
  // Tokens [0, kept_prefix) are never dropped (<= held_tokens).
  int64_t kept_prefix = 0;
  bool prefix_is_pack = false;         // the kept prefix is exactly the session's pack (for the words)
  int64_t prompt_tokens = 0;           // this turn's prompt
  int64_t reply_tokens = 0;            // room wanted for the answer (max_tokens)
  int64_t limit_tokens = 0;            // the binding context limit (ContextLimit::max_tokens)
};

struct TruncationPlan {
  // False when the conversation fits with room for the reply, or when there
  // is nothing after the kept prefix to drop.
  bool needed = false;
  // Held tokens [kept_prefix, tail_begin) are dropped; [tail_begin,
  // held_tokens) are kept after the prefix.
  int64_t tail_begin = 0;
  int64_t dropped_tokens = 0;
  uint32_t dropped_turns = 0;          // turns whose tokens past the prefix were dropped
  // The turns kept, first_token renumbered for the shortened token list.
  std::vector<SessionTurn> kept_turns;
  // "context overflow: dropped turns 1-12 (1530 tokens), kept the pack (64
  // tokens) and turns 13-16".
  std::string description;
};

// Drops the fewest oldest whole turns after the kept prefix so that prefix +
// kept tail + prompt + reply fits the limit; when no choice does, all of
// them (the caller then clamps the reply or refuses a prompt that does not
// fit even so). A turn that starts inside the kept prefix loses its part
// past it (counted dropped); one wholly inside it becomes part of the prefix.
TruncationPlan plan_truncation(const TruncationInputs& in);

// The kept prefix's KV: positions [0, n) of `from` copied as they are into
// `to` (empty, same store config), which then holds n positions. Sliding-
// window layers copy the window n's next query sees; when `from` no longer
// holds it, nothing is copied and `to` stays empty (the caller prefills from
// position 0). Returns the positions copied (n or 0).
absl::StatusOr<int64_t> copy_kv_prefix(const QuantizedKvCache& from, int64_t n, QuantizedKvCache& to);

// Shift: the cells of positions [tail_begin, end) of `from` go to positions
// [to.size(), to.size() + end - tail_begin) of `to` (same store config,
// holding the kept prefix) without recomputation: keys are decoded to f32
// (dequantized, Hadamard undone), re-rotated by RoPE by (to.size() -
// tail_begin) positions (NORM or NEOX pairs, the model's frequencies with
// their factors) and stored again in `to`'s codec; values are copied as they
// are. FAILED_PRECONDITION for models with sliding-window layers (their rows
// past the window are gone). Returns the positions `to` holds after.
absl::StatusOr<int64_t> shift_kv_tail(const QuantizedKvCache& from, int64_t tail_begin, int64_t end,
                                      const KvRope& rope, QuantizedKvCache& to);

}  // namespace baton
