// Chat prompts for the OpenAI-compatible API (openai_api.h): messages ->
// the model's chat format -> token ids.
//
// No Jinja engine: the GGUF's tokenizer.chat_template is only used to
// recognise a known family by its markers, and the family's layout is
// written out here.
//   llama3   "<|start_header_id|>" in the template (Llama 3 / 3.x):
//            <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> ...
//            <|start_header_id|>assistant<|end_header_id|>\n\n
//            (content trimmed, as the template does; BOS by the tokenizer's rule)
//   chatml   "<|im_start|>" (Qwen2, many fine-tunes):
//            <|im_start|>ROLE\nCONTENT<|im_end|>\n ... <|im_start|>assistant\n
//            (Qwen2's default system prompt when its template has one)
//   mistral  "[INST]" (Llama 2 chat, Mistral Instruct):
//            [INST] SYSTEM\n\nUSER [/INST]ASSISTANT</s>[INST] USER [/INST]
//   default  anything else, or no template (the documented default; Zephyr /
//            TinyLlama-chat layout):
//            <|system|>\nCONTENT</s>\n<|user|>\nCONTENT</s>\n<|assistant|>\n
//            where </s> is the vocabulary's EOS text.
//
// Safety: only the template's own markers may become control tokens; the
// messages' text is tokenized with parse_special off, so a user who types
// "<|im_end|>" gets those characters, not the control token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf/gguf_file.h"
#include "common/tokenizer/tokenizer.h"

namespace baton {

enum class ChatTemplateFamily { kDefault, kLlama3, kChatml, kMistral };

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant" (openai_api.h maps "developer" to "system")
  std::string content;  // UTF-8 text
};

// A piece of the rendered prompt: a template marker that may be a control
// token ("<|im_start|>") or text (role names, separators, message content).
struct ChatSegment {
  std::string text;
  bool marker = false;
};

struct ChatRenderOptions {
  bool add_generation_prompt = true;  // end with the assistant's header
  // A later turn of a conversation the agent already holds (a baton session):
  // starts by closing the assistant's last turn (the agent keeps the answer's
  // tokens but not the end-of-turn token that stopped it, and an answer cut
  // at max_tokens has none), and adds no default system prompt.
  bool continuation = false;
  std::string eos_text = "</s>";      // the default and mistral layouts close turns with it
  // chatml: system prompt used when the messages have none ("" = none).
  std::string default_system;
};

// The family whose markers `jinja` (tokenizer.chat_template) contains;
// kDefault for an empty or unknown template.
ChatTemplateFamily detect_chat_template(std::string_view jinja);
const char* chat_template_family_name(ChatTemplateFamily family);

// Renders `messages` in `family`'s layout. Roles other than system, user and
// assistant are rendered as given (the model may not know them).
std::vector<ChatSegment> render_chat(ChatTemplateFamily family, const std::vector<ChatMessage>& messages,
                                     const ChatRenderOptions& options);

// The segments' text concatenated (what the prompt reads as).
std::string chat_text(const std::vector<ChatSegment>& segments);

// Token ids of the rendered prompt: a marker that is one control (or
// user-defined) token of the vocabulary becomes that token; everything else is
// tokenized as plain text (parse_special off). BOS first when `add_bos` and the
// tokenizer's rule (tokenizer.ggml.add_bos_token) asks for it.
std::vector<int32_t> tokenize_chat(const Tokenizer& tokenizer, const std::vector<ChatSegment>& segments,
                                   bool add_bos);

// What a model file says about chat: its template family and the options it
// implies (EOS text; Qwen2's default system prompt).
struct ChatFormat {
  ChatTemplateFamily family = ChatTemplateFamily::kDefault;
  ChatRenderOptions options;
};
ChatFormat chat_format_from_gguf(const GgufFile& file, const Tokenizer& tokenizer);

}  // namespace baton
