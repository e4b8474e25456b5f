#include "edge_decode/generate/chat_turn.h"

#include "absl/strings/str_format.h"
#include "edge_decode/http/chat_template.h"

namespace baton {

absl::StatusOr<ChatTurnTokens> chat_turn_tokens(const GgufFile& file, const Tokenizer& tokenizer,
                                                const v1::ChatTurn& chat, bool continuing, bool add_bos) {
  if (chat.messages().empty()) return absl::InvalidArgumentError("chat has no messages");
  std::vector<ChatMessage> messages;
  for (int i = 0; i < chat.messages_size(); ++i) {
    const v1::ChatTurnMessage& message = chat.messages(i);
    if (message.role() != "system" && message.role() != "user" && message.role() != "assistant") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "chat.messages[%d].role = '%s'; must be system, user or assistant", i, message.role()));
    }
    messages.push_back(ChatMessage{message.role(), message.content()});
  }
  const ChatFormat format = chat_format_from_gguf(file, tokenizer);
  ChatRenderOptions options = format.options;
  options.continuation = continuing;
  ChatTurnTokens out;
  out.tokens = tokenize_chat(tokenizer, render_chat(format.family, messages, options), add_bos);
  // As the HTTP chat completions do: the default layout's turn marker is
  // text in most vocabularies, so stop there too, not only at EOS.
  if (format.family == ChatTemplateFamily::kDefault) out.stops.push_back("<|user|>");
  return out;
}

}  // namespace baton
