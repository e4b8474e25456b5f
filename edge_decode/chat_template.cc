#include "edge_decode/chat_template.h"

#include "absl/strings/match.h"

namespace baton {
namespace {

constexpr char kQwenDefaultSystem[] = "You are a helpful assistant.";

// Without leading and trailing ASCII whitespace (Jinja's trim).
std::string_view trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t first = text.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(kSpace) - first + 1);
}

class SegmentWriter {
 public:
  void marker(std::string_view text) { out_.push_back(ChatSegment{std::string(text), true}); }
  void text(std::string_view text) {
    if (text.empty()) return;
    if (!out_.empty() && !out_.back().marker) {
      out_.back().text.append(text);
    } else {
      out_.push_back(ChatSegment{std::string(text), false});
    }
  }
  std::vector<ChatSegment> take() { return std::move(out_); }

 private:
  std::vector<ChatSegment> out_;
};

std::vector<ChatSegment> render_llama3(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) {
  SegmentWriter w;
  if (options.continuation) w.marker("<|eot_id|>");
  for (const ChatMessage& message : messages) {
    w.marker("<|start_header_id|>");
    w.text(message.role);
    w.marker("<|end_header_id|>");
    w.text("\n\n");
    w.text(trim(message.content));
    w.marker("<|eot_id|>");
  }
  if (options.add_generation_prompt) {
    w.marker("<|start_header_id|>");
    w.text("assistant");
    w.marker("<|end_header_id|>");
    w.text("\n\n");
  }
  return w.take();
}

std::vector<ChatSegment> render_chatml(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) {
  SegmentWriter w;
  const bool has_system = !messages.empty() && messages.front().role == "system";
  auto turn = [&w](std::string_view role, std::string_view content) {
    w.marker("<|im_start|>");
    w.text(role);
    w.text("\n");
    w.text(content);
    w.marker("<|im_end|>");
    w.text("\n");
  };
  if (options.continuation) {
    w.marker("<|im_end|>");
    w.text("\n");
  }
  if (!has_system && !options.continuation && !options.default_system.empty()) {
    turn("system", options.default_system);
  }
  for (const ChatMessage& message : messages) turn(message.role, message.content);
  if (options.add_generation_prompt) {
    w.marker("<|im_start|>");
    w.text("assistant\n");
  }
  return w.take();
}

std::vector<ChatSegment> render_mistral(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) {
  SegmentWriter w;
  if (options.continuation) w.marker(options.eos_text);
  std::string pending_system;  // merged into the next user turn
  for (const ChatMessage& message : messages) {
    if (message.role == "system") {
      if (!pending_system.empty()) pending_system += "\n\n";
      pending_system += message.content;
    } else if (message.role == "assistant") {
      w.text(message.content);
      w.marker(options.eos_text);
    } else {
      w.marker("[INST]");
      w.text(" ");
      if (!pending_system.empty()) {
        w.text(pending_system);
        w.text("\n\n");
        pending_system.clear();
      }
      w.text(message.content);
      w.text(" ");
      w.marker("[/INST]");
    }
  }
  if (!pending_system.empty()) {  // a system message with no user turn after it
    w.marker("[INST]");
    w.text(" ");
    w.text(pending_system);
    w.text(" ");
    w.marker("[/INST]");
  }
  return w.take();
}

std::vector<ChatSegment> render_default(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) {
  SegmentWriter w;
  if (options.continuation) {
    w.marker(options.eos_text);
    w.text("\n");
  }
  for (const ChatMessage& message : messages) {
    w.text("<|" + message.role + "|>\n");
    w.text(message.content);
    w.marker(options.eos_text);
    w.text("\n");
  }
  if (options.add_generation_prompt) w.text("<|assistant|>\n");
  return w.take();
}

}  // namespace

ChatTemplateFamily detect_chat_template(std::string_view jinja) {
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) return ChatTemplateFamily::kLlama3;
  if (jinja.find("<|im_start|>") != std::string_view::npos) return ChatTemplateFamily::kChatml;
  if (jinja.find("[INST]") != std::string_view::npos) return ChatTemplateFamily::kMistral;
  return ChatTemplateFamily::kDefault;
}

const char* chat_template_family_name(ChatTemplateFamily family) {
  switch (family) {
    case ChatTemplateFamily::kLlama3: return "llama3";
    case ChatTemplateFamily::kChatml: return "chatml";
    case ChatTemplateFamily::kMistral: return "mistral";
    case ChatTemplateFamily::kDefault: break;
  }
  return "default";
}

std::vector<ChatSegment> render_chat(ChatTemplateFamily family, const std::vector<ChatMessage>& messages,
                                     const ChatRenderOptions& options) {
  switch (family) {
    case ChatTemplateFamily::kLlama3: return render_llama3(messages, options);
    case ChatTemplateFamily::kChatml: return render_chatml(messages, options);
    case ChatTemplateFamily::kMistral: return render_mistral(messages, options);
    case ChatTemplateFamily::kDefault: break;
  }
  return render_default(messages, options);
}

std::string chat_text(const std::vector<ChatSegment>& segments) {
  std::string out;
  for (const ChatSegment& segment : segments) out += segment.text;
  return out;
}

std::vector<int32_t> tokenize_chat(const Tokenizer& tokenizer, const std::vector<ChatSegment>& segments,
                                   bool add_bos) {
  std::vector<int32_t> out;
  if (add_bos && tokenizer.add_bos() && tokenizer.bos_id() >= 0) out.push_back(tokenizer.bos_id());
  EncodeOptions plain;
  plain.add_bos = false;
  plain.add_eos = false;
  plain.parse_special = false;
  EncodeOptions special = plain;
  special.parse_special = true;
  std::string pending;  // plain text not tokenized yet
  auto flush = [&] {
    if (pending.empty()) return;
    const std::vector<int32_t> ids = tokenizer.encode(pending, plain);
    out.insert(out.end(), ids.begin(), ids.end());
    pending.clear();
  };
  for (const ChatSegment& segment : segments) {
    if (segment.marker) {
      // A marker is a token only when the vocabulary has it as one (e.g.
      // "</s>" in a llama vocabulary, "<|im_start|>" in Qwen2's); otherwise
      // it is text like any other.
      const std::vector<int32_t> ids = tokenizer.encode(segment.text, special);
      if (ids.size() == 1 && tokenizer.encode(segment.text, plain) != ids) {
        flush();
        out.push_back(ids.front());
        continue;
      }
    }
    pending += segment.text;
  }
  flush();
  return out;
}

ChatFormat chat_format_from_gguf(const GgufFile& file, const Tokenizer& tokenizer) {
  ChatFormat format;
  const absl::StatusOr<std::string> jinja = file.get_string("tokenizer.chat_template");
  if (jinja.ok()) {
    format.family = detect_chat_template(*jinja);
    if (format.family == ChatTemplateFamily::kChatml && absl::StrContains(*jinja, kQwenDefaultSystem)) {
      format.options.default_system = kQwenDefaultSystem;
    }
  }
  if (tokenizer.eos_id() >= 0) format.options.eos_text = tokenizer.token_text(tokenizer.eos_id());
  return format;
}

}  // namespace baton
