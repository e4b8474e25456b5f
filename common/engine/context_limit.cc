#include "common/engine/context_limit.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace baton {
namespace {

std::string trained_words(const ContextLimit& limit) {
  return absl::StrFormat("the model's trained context of %d tokens", limit.trained_tokens);
}

std::string memory_words(const ContextLimit& limit) {
  return absl::StrFormat("this device's KV memory budget of %d tokens with %s", limit.memory_tokens,
                         limit.memory_detail);
}

}  // namespace

std::string ContextLimit::describe() const {
  if (memory_tokens < 0) return trained_words(*this);
  if (memory_binds()) {
    return absl::StrCat(memory_words(*this), " (the model's trained context is ", trained_tokens, " tokens)");
  }
  return absl::StrFormat("%s (the KV memory budget would hold %d with %s)", trained_words(*this), memory_tokens,
                         memory_detail);
}

absl::Status check_context_fits(const ContextLimit& limit, int64_t held_tokens, int64_t prompt_tokens) {
  const int64_t needed = held_tokens + prompt_tokens;
  if (needed <= limit.max_tokens()) return absl::OkStatus();
  const std::string parts = held_tokens > 0
                                ? absl::StrFormat("%d held + %d of this prompt", held_tokens, prompt_tokens)
                                : absl::StrFormat("%d of this prompt", prompt_tokens);
  if (limit.memory_binds()) {
    // The wording "session needs N tokens; this device fits M with codec C"
    // is kept: clients and the OpenAI front end know it.
    return absl::ResourceExhaustedError(
        absl::StrFormat("session needs %d tokens; this device fits %d with %s; needed: %s; the memory budget "
                        "binds: the model's trained context is %d tokens",
                        needed, limit.memory_tokens, limit.memory_detail, parts, limit.trained_tokens));
  }
  std::string message = absl::StrFormat(
      "session needs %d tokens; the model's trained context is %d tokens (context_length in its GGUF): at most "
      "%d fit; needed: %s",
      needed, limit.trained_tokens, limit.trained_tokens, parts);
  if (limit.memory_tokens >= 0) {
    absl::StrAppend(&message, absl::StrFormat("; memory is not the limit (this device fits %d with %s)",
                                              limit.memory_tokens, limit.memory_detail));
  }
  return absl::InvalidArgumentError(message);
}

int64_t generation_room(const ContextLimit& limit, int64_t context_tokens, int64_t max_new_tokens) {
  return std::max<int64_t>(0, std::min(max_new_tokens, limit.max_tokens() - context_tokens));
}

std::string context_overflow_warning(const ContextLimit& limit, int64_t context_tokens, int64_t max_new_tokens) {
  const int64_t room = generation_room(limit, context_tokens, max_new_tokens);
  if (room >= max_new_tokens) return "";
  return absl::StrFormat(
      "context + max_tokens = %d + %d = %d tokens exceed %s: at most %d tokens will be generated (max_tokens "
      "clamped; the answer ends with finish reason \"context full\")",
      context_tokens, max_new_tokens, context_tokens + max_new_tokens,
      limit.memory_binds() ? memory_words(limit) : trained_words(limit), room);
}

}  // namespace baton
