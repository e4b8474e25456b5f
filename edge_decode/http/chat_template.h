// Chat prompts for the OpenAI-compatible API (openai_api.h): messages ->
// the model's chat format -> token ids.
//
// No Jinja engine: the GGUF's tokenizer.chat_template is only used to
// recognise a known family by its markers, and the family's layout is
// written out here, as the published template renders it.
//   llama3   "<|start_header_id|>" in the template (Llama 3 / 3.x):
//            <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> ...
//            <|start_header_id|>assistant<|end_header_id|>\n\n
//            (content trimmed, as the template does; BOS by the tokenizer's rule)
//            Llama 3.1 / 3.2 / 3.3 templates ("Cutting Knowledge Date" in the
//            template): a first turn always opens with the system header
//            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
//            followed by the system message (if any), as the template does.
//   chatml   "<|im_start|>" (Qwen2, many fine-tunes):
//            <|im_start|>ROLE\nCONTENT<|im_end|>\n ... <|im_start|>assistant\n
//            (Qwen2's default system prompt when its template has one)
//   qwen3    "<|im_start|>" and "</think>" (Qwen3, QwQ): chatml, and an
//            assistant message before the last user message loses its
//            reasoning: only the text after its last "</think>" is kept
//            (leading newlines dropped); later assistant messages keep a
//            <think>\nREASONING\n</think>\n\n block. "<think>" and
//            "</think>" are otherwise plain text in the messages.
//   gemma    "<start_of_turn>" (Gemma 2 / 3):
//            <start_of_turn>user\nSYSTEM\n\nCONTENT<end_of_turn>\n
//            <start_of_turn>model\nCONTENT<end_of_turn>\n ... <start_of_turn>model\n
//            (a leading system message is merged into the first turn, role
//            "assistant" is written "model", content trimmed)
//   phi3     "<|end|>" and "<|assistant|>" or "<|user|>" (Phi-3, Phi-3.5, Phi-4-mini):
//            <|system|>\nCONTENT<|end|>\n<|user|>\nCONTENT<|end|>\n<|assistant|>\n
//            (the markers strip the whitespace after them when tokenized, as
//            Phi-3's added tokens do: rstrip)
//   mistral  "[INST]" (Llama 2 chat, Mistral Instruct):
//            [INST] SYSTEM\n\nUSER [/INST]ASSISTANT</s>[INST] USER [/INST]
//   default  anything else, or no template (the documented default; Zephyr /
//            TinyLlama-chat layout):
//            <|system|>\nCONTENT</s>\n<|user|>\nCONTENT</s>\n<|assistant|>\n
//            where </s> is the vocabulary's EOS text.
//
// Continuation (a later turn of a session the agent holds): the rendering
// starts by closing the assistant's last answer with the family's end-of-turn
// marker; what the session already holds (including a Qwen3 answer's
// reasoning) is kept as it is.
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

// New families go at the end (tests/fuzz/edge_request_fuzz.cc picks one by index).
enum class ChatTemplateFamily { kDefault, kLlama3, kChatml, kMistral, kGemma, kPhi3, kQwen3 };
inline constexpr int kChatTemplateFamilyCount = 7;

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant" (openai_api.h maps "developer" to "system")
  std::string content;  // UTF-8 text
};

// A piece of the rendered prompt: a template marker that may be a control
// token ("<|im_start|>") or text (role names, separators, message content).
struct ChatSegment {
  std::string text;
  bool marker = false;
  // A marker that, when it is a token, swallows the whitespace after it
  // (Phi-3's added tokens are rstrip: "<|user|>\nHi" -> <|user|>, "Hi").
  bool rstrip = false;
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
  // llama3: the template's "Cutting Knowledge Date: ..." line (Llama 3.1+);
  // non-empty: a first turn always starts with a system header holding it,
  // "Today Date: " + today, a blank line and the system message.
  std::string knowledge_date;
  // llama3 with knowledge_date: the "Today Date" value, "%d %b %Y"
  // ("26 Jul 2024"); empty: the current UTC date at render time, as
  // llama.cpp's and Hugging Face's strftime_now give it.
  std::string today;
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
// implies (EOS text; Qwen2's default system prompt; Llama 3.1+'s knowledge
// date line).
struct ChatFormat {
  ChatTemplateFamily family = ChatTemplateFamily::kDefault;
  ChatRenderOptions options;
};
ChatFormat chat_format_from_gguf(const GgufFile& file, const Tokenizer& tokenizer);

}  // namespace baton
