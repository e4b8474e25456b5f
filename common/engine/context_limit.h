// ContextLimit: how many tokens one conversation may hold, and which limit
// binds. Two limits apply: the model's trained context (n_ctx_train, the
// `context_length` of its GGUF: the positions it was trained on) and, on the
// edge agent, the KV memory budget for the session's codec (DESIGN.md "Edge
// memory"). The smaller one binds, and every message names it with both
// numbers. One piece for the edge agent (generate_turn.cc) and for
// `baton generate --model` (tools/cli/cmd_generate.cc), so both refuse the same
// prompts in the same words and stop generating at the same length.
//
// Rules (README "Context limits"):
// - a conversation (tokens held + this turn's prompt) over the limit is
//   refused before any work: INVALID_ARGUMENT when the trained context binds
//   (no retry or other device helps), RESOURCE_EXHAUSTED when the memory
//   budget binds;
// - prompt + max_tokens over the limit is not refused: max_tokens is clamped
//   to the room left (generation ends with finish reason "context full"), and
//   a warning says so before the first token.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace baton {

struct ContextLimit {
  int64_t trained_tokens = 0;   // the model's n_ctx_train
  // Tokens the KV memory budget holds with the session's codec; -1 when no
  // budget applies (local mode allocates the KV for the request itself).
  int64_t memory_tokens = -1;
  // The budget in words, for messages: "codec int4-g32 (KV budget 512.0 MiB
  // = limit 4.00 GiB - weights ...; 87.4 KiB per token)". Empty when no budget.
  std::string memory_detail;

  bool memory_binds() const { return memory_tokens >= 0 && memory_tokens < trained_tokens; }
  // The binding limit, tokens.
  int64_t max_tokens() const { return memory_binds() ? memory_tokens : trained_tokens; }
  // The binding limit in words, with the other one:
  // "the model's trained context of 1024 tokens (the KV memory budget would
  // hold 47185 with codec int4-g32 (...))".
  std::string describe() const;
};

// OK when a conversation of `held_tokens` (earlier turns, a pack) plus
// `prompt_tokens` fits the limit; else the error named above:
// "session needs 2178 tokens; the model's trained context is 1024 tokens
// (context_length in its GGUF): at most 1024 fit; needed: 2178 of this
// prompt; memory is not the limit (this device fits 47185 with codec
// int4-g32 (KV budget ...))", or, when memory binds, "session needs 9000
// tokens; this device fits 6144 with codec int4-g32 (KV budget ...); needed:
// ...; the memory budget binds: the model's trained context is 32768 tokens".
absl::Status check_context_fits(const ContextLimit& limit, int64_t held_tokens, int64_t prompt_tokens);

// Tokens a turn may generate after a conversation of `context_tokens`:
// min(max_new_tokens, limit - context_tokens), at least 0.
int64_t generation_room(const ContextLimit& limit, int64_t context_tokens, int64_t max_new_tokens);

// "" when `context_tokens` + `max_new_tokens` fit; else the warning given
// before generating: "context + max_tokens = 900 + 200 = 1100 tokens exceed
// the model's trained context of 1024 tokens: at most 124 tokens will be
// generated (max_tokens clamped; ...)".
std::string context_overflow_warning(const ContextLimit& limit, int64_t context_tokens, int64_t max_new_tokens);

}  // namespace baton
