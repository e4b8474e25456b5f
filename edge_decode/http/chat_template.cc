#include "edge_decode/http/chat_template.h"

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

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

bool contains(std::string_view text, std::string_view needle) { return text.find(needle) != std::string_view::npos; }

// Without leading `chars` / trailing `chars` (Python's lstrip / rstrip).
std::string_view lstrip(std::string_view text, std::string_view chars) {
  const size_t first = text.find_first_not_of(chars);
  return first == std::string_view::npos ? std::string_view() : text.substr(first);
}
std::string_view rstrip(std::string_view text, std::string_view chars) {
  const size_t last = text.find_last_not_of(chars);
  return last == std::string_view::npos ? std::string_view() : text.substr(0, last + 1);
}

class SegmentWriter {
 public:
  void marker(std::string_view text, bool rstrip = false) {
    out_.push_back(ChatSegment{std::string(text), true, rstrip});
  }
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
  size_t first = 0;
  if (!options.knowledge_date.empty() && !options.continuation) {
    // Llama 3.1+: the system header is always there; a leading system
    // message goes into it (trimmed).
    std::string_view system_message;
    if (!messages.empty() && messages.front().role == "system") {
      system_message = trim(messages.front().content);
      first = 1;
    }
    const std::string today =
        options.today.empty() ? absl::FormatTime("%d %b %Y", absl::Now(), absl::UTCTimeZone()) : options.today;
    w.marker("<|start_header_id|>");
    w.text("system");
    w.marker("<|end_header_id|>");
    w.text("\n\n" + options.knowledge_date + "\nToday Date: " + today + "\n\n");
    w.text(system_message);
    w.marker("<|eot_id|>");
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
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

// Qwen3's template: the reasoning of an assistant message before the last
// user message is dropped; later ones are written with a think block.
std::vector<ChatSegment> render_qwen3(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) {
  SegmentWriter w;
  if (options.continuation) {
    w.marker("<|im_end|>");
    w.text("\n");
  }
  // The last user message that is not a tool response (the template's
  // last_query_index); -1 when there is none.
  ptrdiff_t last_query = -1;
  for (ptrdiff_t i = static_cast<ptrdiff_t>(messages.size()) - 1; i >= 0; --i) {
    const std::string& content = messages[i].content;
    if (messages[i].role == "user" &&
        !(content.starts_with("<tool_response>") && content.ends_with("</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    w.marker("<|im_start|>");
    w.text(message.role);
    w.text("\n");
    if (message.role != "assistant") {
      w.text(message.content);
    } else {
      constexpr std::string_view kOpen = "<think>", kClose = "</think>";
      std::string_view content = message.content;
      std::string_view reasoning;  // before the first </think>, after the last <think> there
      const size_t close = content.find(kClose);
      if (close != std::string_view::npos) {
        reasoning = rstrip(content.substr(0, close), "\n");
        const size_t open = reasoning.rfind(kOpen);
        if (open != std::string_view::npos) reasoning = reasoning.substr(open + kOpen.size());
        reasoning = lstrip(reasoning, "\n");
        content = lstrip(content.substr(content.rfind(kClose) + kClose.size()), "\n");  // after the last
      }
      const bool last = i + 1 == messages.size();
      if (static_cast<ptrdiff_t>(i) > last_query && (last || !reasoning.empty())) {
        w.text("<think>\n");
        w.text(lstrip(rstrip(reasoning, "\n"), "\n"));
        w.text("\n</think>\n\n");
      }
      w.text(content);
    }
    w.marker("<|im_end|>");
    w.text("\n");
  }
  if (options.add_generation_prompt) {
    w.marker("<|im_start|>");
    w.text("assistant\n");
  }
  return w.take();
}

// Gemma's template: no system role (a leading system message becomes a
// prefix of the first turn), "model" for the assistant, content trimmed.
std::vector<ChatSegment> render_gemma(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) {
  SegmentWriter w;
  if (options.continuation) {
    w.marker("<end_of_turn>");
    w.text("\n");
  }
  size_t first = 0;
  std::string prefix;
  if (!messages.empty() && messages.front().role == "system") {
    prefix = messages.front().content + "\n\n";
    first = 1;
  }
  auto turn = [&w](std::string_view role, std::string_view first_prefix, std::string_view content) {
    w.marker("<start_of_turn>");
    w.text(role);
    w.text("\n");
    w.text(first_prefix);
    w.text(trim(content));
    w.marker("<end_of_turn>");
    w.text("\n");
  };
  for (size_t i = first; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    turn(role == "assistant" ? "model" : role, i == first ? std::string_view(prefix) : "", messages[i].content);
  }
  // A system message with no turn after it: the template would drop it;
  // kept as a user turn so the model still reads it.
  if (first == 1 && messages.size() == 1) turn("user", "", messages.front().content);
  if (options.add_generation_prompt) {
    w.marker("<start_of_turn>");
    w.text("model\n");
  }
  return w.take();
}

// Phi-3's template: <|ROLE|>\nCONTENT<|end|>\n per message.
std::vector<ChatSegment> render_phi3(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) {
  SegmentWriter w;
  if (options.continuation) {
    w.marker("<|end|>", /*rstrip=*/true);
    w.text("\n");
  }
  for (const ChatMessage& message : messages) {
    w.marker("<|" + message.role + "|>", /*rstrip=*/true);
    w.text("\n");
    w.text(message.content);
    w.marker("<|end|>", /*rstrip=*/true);
    w.text("\n");
  }
  if (options.add_generation_prompt) {
    w.marker("<|assistant|>", /*rstrip=*/true);
    w.text("\n");
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

// Llama 3.1+: the "Cutting Knowledge Date: December 2023" text of the
// template (up to the escaped newline or the closing quote); "" if absent.
std::string knowledge_date_line(std::string_view jinja) {
  constexpr std::string_view kKey = "Cutting Knowledge Date:";
  const size_t begin = jinja.find(kKey);
  if (begin == std::string_view::npos) return "";
  const size_t end = jinja.find_first_of("\\\"'\n", begin);
  return std::string(trim(jinja.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin)));
}

}  // namespace

ChatTemplateFamily detect_chat_template(std::string_view jinja) {
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) return ChatTemplateFamily::kLlama3;
  if (jinja.find("<|im_start|>") != std::string_view::npos) {
    return contains(jinja, "</think>") ? ChatTemplateFamily::kQwen3 : ChatTemplateFamily::kChatml;
  }
  if (jinja.find("<start_of_turn>") != std::string_view::npos) return ChatTemplateFamily::kGemma;
  // Phi-4-mini writes "<|" + role + "|>", so only "<|assistant|>" is literal.
  if (contains(jinja, "<|end|>") && (contains(jinja, "<|assistant|>") || contains(jinja, "<|user|>"))) {
    return ChatTemplateFamily::kPhi3;
  }
  if (jinja.find("[INST]") != std::string_view::npos) return ChatTemplateFamily::kMistral;
  return ChatTemplateFamily::kDefault;
}

const char* chat_template_family_name(ChatTemplateFamily family) {
  switch (family) {
    case ChatTemplateFamily::kLlama3: return "llama3";
    case ChatTemplateFamily::kChatml: return "chatml";
    case ChatTemplateFamily::kMistral: return "mistral";
    case ChatTemplateFamily::kGemma: return "gemma";
    case ChatTemplateFamily::kPhi3: return "phi3";
    case ChatTemplateFamily::kQwen3: return "qwen3";
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
    case ChatTemplateFamily::kGemma: return render_gemma(messages, options);
    case ChatTemplateFamily::kPhi3: return render_phi3(messages, options);
    case ChatTemplateFamily::kQwen3: return render_qwen3(messages, options);
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
  bool strip_whitespace = false;  // after an rstrip marker token
  for (const ChatSegment& segment : segments) {
    if (segment.marker) {
      // A marker is a token only when the vocabulary has it as one (e.g.
      // "</s>" in a llama vocabulary, "<|im_start|>" in Qwen2's); otherwise
      // it is text like any other.
      const std::vector<int32_t> ids = tokenizer.encode(segment.text, special);
      if (ids.size() == 1 && tokenizer.encode(segment.text, plain) != ids) {
        flush();
        out.push_back(ids.front());
        strip_whitespace = segment.rstrip;
        continue;
      }
    }
    std::string_view text = segment.text;
    // Whitespace as Hugging Face's rstrip takes it (Python's str.isspace, ASCII part).
    if (strip_whitespace) text = lstrip(text, " \t\n\r\f\v");
    strip_whitespace = strip_whitespace && text.empty();
    pending += text;
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
    if (format.family == ChatTemplateFamily::kLlama3) format.options.knowledge_date = knowledge_date_line(*jinja);
  }
  if (tokenizer.eos_id() >= 0) format.options.eos_text = tokenizer.token_text(tokenizer.eos_id());
  return format;
}

}  // namespace baton
