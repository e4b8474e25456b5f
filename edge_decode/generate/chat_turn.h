// GenerateRequest.chat: the messages of one chat turn rendered in the model's
// chat template (chat_template.h, the same rendering as the HTTP chat
// completions) and tokenized, for `baton chat` over gRPC.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf/gguf_file.h"
#include "common/tokenizer/tokenizer.h"
#include "proto/baton.pb.h"

namespace baton {

struct ChatTurnTokens {
  std::vector<int32_t> tokens;
  // Stop strings the template needs besides EOS (the default layout's
  // "<|user|>", text in most vocabularies).
  std::vector<std::string> stops;
};

// `continuing`: the session already holds earlier turns (the rendering
// closes the assistant's last answer first and adds no default system
// prompt). `add_bos`: a conversation's first tokens (no pack before them).
// InvalidArgument when there is no message or a role is not system, user or
// assistant.
absl::StatusOr<ChatTurnTokens> chat_turn_tokens(const GgufFile& file, const Tokenizer& tokenizer,
                                                const v1::ChatTurn& chat, bool continuing, bool add_bos);

}  // namespace baton
