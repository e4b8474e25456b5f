// Chat templates of Gemma 3, Phi-3, Qwen3 and Llama 3.2 (edge_decode/
// chat_template.h). What must hold: each family is detected from excerpts
// of its published template (the markers and lines that set it apart; the
// full templates are in the models' tokenizer_config.json and GGUFs); a
// multi-turn session (system + user + assistant + user) renders as the
// template renders it, with and without the generation prompt, and as a
// continuation of a held session; template markers become the family's
// tokens in the vocab-only GGUFs of tests/data/vocab (Phi-3's markers eat
// the whitespace after them); unknown templates keep the default layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "common/gguf/gguf_file.h"
#include "common/gguf/gguf_writer.h"
#include "common/tokenizer/tokenizer.h"
#include "edge_decode/http/chat_template.h"
#include "tests/unit/tokenizer_test_util.h"

namespace baton {
namespace {

using testing_tokenizer::VocabPath;
using Ids = std::vector<int32_t>;

// Excerpts of the published templates.
constexpr char kGemma3Excerpt[] =
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "{{ message['content'] | trim }}\n{{ '<end_of_turn>\\n' }}\n";
constexpr char kPhi3Excerpt[] =
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + "
    "'<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}";
constexpr char kPhi4MiniExcerpt[] =
    "{% else %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}";
constexpr char kQwen3Excerpt[] =
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "{%- if '</think>' in message.content %}\n"
    "{%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}\n";
constexpr char kQwen25Excerpt[] =
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}";
constexpr char kLlama32Excerpt[] =
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n";
constexpr char kLlama3Excerpt[] =
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}";
constexpr char kZephyrExcerpt[] = "{{ '<|user|>\\n' + message['content'] + eos_token }}{{ '<|assistant|>' }}";

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Why?"}};
const std::vector<ChatMessage> kNextTurn = {{"user", "Why?"}};

std::string Render(ChatTemplateFamily family, const std::vector<ChatMessage>& messages,
                   ChatRenderOptions options = {}) {
  return chat_text(render_chat(family, messages, options));
}

ChatRenderOptions Continuation() {
  ChatRenderOptions options;
  options.continuation = true;
  return options;
}

TEST(ChatTemplateFamilies, DetectedFromThePublishedTemplates) {
  EXPECT_EQ(detect_chat_template(kGemma3Excerpt), ChatTemplateFamily::kGemma);
  EXPECT_EQ(detect_chat_template(kPhi3Excerpt), ChatTemplateFamily::kPhi3);
  EXPECT_EQ(detect_chat_template(kPhi4MiniExcerpt), ChatTemplateFamily::kPhi3);
  EXPECT_EQ(detect_chat_template(kQwen3Excerpt), ChatTemplateFamily::kQwen3);
  EXPECT_EQ(detect_chat_template(kQwen25Excerpt), ChatTemplateFamily::kChatml);
  EXPECT_EQ(detect_chat_template(kLlama32Excerpt), ChatTemplateFamily::kLlama3);
  EXPECT_EQ(detect_chat_template(kLlama3Excerpt), ChatTemplateFamily::kLlama3);
  // Unknown templates keep the documented default layout.
  EXPECT_EQ(detect_chat_template(kZephyrExcerpt), ChatTemplateFamily::kDefault);
  EXPECT_EQ(detect_chat_template("{{ messages | tojson }}"), ChatTemplateFamily::kDefault);
  for (int i = 0; i < kChatTemplateFamilyCount; ++i) {
    EXPECT_STRNE(chat_template_family_name(static_cast<ChatTemplateFamily>(i)), "") << i;
  }
  EXPECT_STREQ(chat_template_family_name(ChatTemplateFamily::kGemma), "gemma");
  EXPECT_STREQ(chat_template_family_name(ChatTemplateFamily::kPhi3), "phi3");
  EXPECT_STREQ(chat_template_family_name(ChatTemplateFamily::kQwen3), "qwen3");
}

TEST(ChatTemplateFamilies, GemmaMergesTheSystemPromptAndSaysModel) {
  EXPECT_EQ(Render(ChatTemplateFamily::kGemma, kConversation),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
            "<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nWhy?<end_of_turn>\n"
            "<start_of_turn>model\n");
  ChatRenderOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  // Content is trimmed; the system text is not.
  EXPECT_EQ(Render(ChatTemplateFamily::kGemma, {{"system", " S "}, {"user", "  Hi\n"}}, no_prompt),
            "<start_of_turn>user\n S \n\nHi<end_of_turn>\n");
  EXPECT_EQ(Render(ChatTemplateFamily::kGemma, kNextTurn, Continuation()),
            "<end_of_turn>\n<start_of_turn>user\nWhy?<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplateFamilies, Phi3Layout) {
  EXPECT_EQ(Render(ChatTemplateFamily::kPhi3, kConversation),
            "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n"
            "<|user|>\nWhy?<|end|>\n<|assistant|>\n");
  EXPECT_EQ(Render(ChatTemplateFamily::kPhi3, kNextTurn, Continuation()),
            "<|end|>\n<|user|>\nWhy?<|end|>\n<|assistant|>\n");
}

TEST(ChatTemplateFamilies, Qwen3DropsTheReasoningOfEarlierAnswers) {
  const std::vector<ChatMessage> thought = {
      {"system", "S"},
      {"user", "Hi"},
      {"assistant", "<think>\nI should greet.\n</think>\n\nHello."},
      {"user", "Why?"}};
  EXPECT_EQ(Render(ChatTemplateFamily::kQwen3, thought),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n"
            "<|im_start|>assistant\n");
  // An answer after the last user message keeps a think block (an empty one
  // when it had none), as the template writes it.
  ChatRenderOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  EXPECT_EQ(Render(ChatTemplateFamily::kQwen3, {{"user", "Hi"}, {"assistant", "<think>\nplan\n</think>\n\nHello."}},
                   no_prompt),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nplan\n</think>\n\nHello.<|im_end|>\n");
  EXPECT_EQ(Render(ChatTemplateFamily::kQwen3, {{"user", "Hi"}, {"assistant", "Hello."}}, no_prompt),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello.<|im_end|>\n");
  // Elsewhere the markers are plain text.
  EXPECT_EQ(Render(ChatTemplateFamily::kQwen3, {{"user", "What is <think>?"}}),
            "<|im_start|>user\nWhat is <think>?<|im_end|>\n<|im_start|>assistant\n");
  // The multi-turn session without reasoning reads as ChatML.
  EXPECT_EQ(Render(ChatTemplateFamily::kQwen3, kConversation), Render(ChatTemplateFamily::kChatml, kConversation));
  EXPECT_EQ(Render(ChatTemplateFamily::kQwen3, kNextTurn, Continuation()),
            "<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateFamilies, Llama32AlwaysOpensWithTheKnowledgeDateHeader) {
  ChatRenderOptions options;
  options.knowledge_date = "Cutting Knowledge Date: December 2023";
  options.today = "26 Jul 2024";
  const std::string header =
      "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
  EXPECT_EQ(Render(ChatTemplateFamily::kLlama3, kConversation, options),
            header + "Be brief.<|eot_id|>"
                     "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                     "<|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(Render(ChatTemplateFamily::kLlama3, kNextTurn, options),
            header + "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n");
  options.continuation = true;  // the header is already in the session
  EXPECT_EQ(Render(ChatTemplateFamily::kLlama3, kNextTurn, options),
            "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // Without a fixed date: today's, in the template's strftime format.
  options.continuation = false;
  options.today.clear();
  const std::string text = Render(ChatTemplateFamily::kLlama3, kNextTurn, options);
  EXPECT_TRUE(std::regex_search(text, std::regex("Today Date: [0-3][0-9] [A-Z][a-z][a-z] 20[0-9][0-9]\n\n<")))
      << text;
}

// --- with the family vocabularies --------------------------------------------

struct Loaded {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
};

// tests/data/vocab/NAME, its chat template replaced by `jinja` when given.
Loaded Load(const std::string& name, const std::string& jinja = "") {
  Loaded out;
  auto file = GgufFile::Open(VocabPath(name));
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return out;
  out.file = std::move(*file);
  if (!jinja.empty()) {
    GgufWriter writer;
    for (const auto& [key, value] : out.file->metadata()) writer.set(key, value);
    writer.set_string("tokenizer.chat_template", jinja);
    auto bytes = writer.write_to_bytes();
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    auto copy = GgufFile::FromBytes(std::move(*bytes));
    EXPECT_TRUE(copy.ok()) << copy.status();
    out.file = std::move(*copy);
  }
  auto tokenizer = Tokenizer::FromGguf(*out.file);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  if (tokenizer.ok()) out.tokenizer = std::move(*tokenizer);
  return out;
}

Ids Plain(const Tokenizer& t, const std::string& text) { return t.encode(text, {.add_bos = false}); }

Ids Concat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

TEST(ChatTemplateFamilies, FormatsComeFromTheFilesTemplates) {
  const Loaded gemma = Load("gemma3-like.gguf");
  EXPECT_EQ(chat_format_from_gguf(*gemma.file, *gemma.tokenizer).family, ChatTemplateFamily::kGemma);
  const Loaded phi3 = Load("phi3-like.gguf");
  EXPECT_EQ(chat_format_from_gguf(*phi3.file, *phi3.tokenizer).family, ChatTemplateFamily::kPhi3);
  const Loaded qwen3 = Load("qwen3-like.gguf");
  EXPECT_EQ(chat_format_from_gguf(*qwen3.file, *qwen3.tokenizer).family, ChatTemplateFamily::kQwen3);
  EXPECT_EQ(chat_format_from_gguf(*qwen3.file, *qwen3.tokenizer).options.default_system, "");
  const Loaded llama32 = Load("llama32-like.gguf");
  const ChatFormat format = chat_format_from_gguf(*llama32.file, *llama32.tokenizer);
  EXPECT_EQ(format.family, ChatTemplateFamily::kLlama3);
  EXPECT_EQ(format.options.knowledge_date, "Cutting Knowledge Date: December 2023");
  EXPECT_EQ(format.options.eos_text, "<|eot_id|>");
  // Llama 3 (3.0): the same family, no knowledge-date header.
  const Loaded llama3 = Load("llama32-like.gguf", kLlama3Excerpt);
  EXPECT_EQ(chat_format_from_gguf(*llama3.file, *llama3.tokenizer).family, ChatTemplateFamily::kLlama3);
  EXPECT_EQ(chat_format_from_gguf(*llama3.file, *llama3.tokenizer).options.knowledge_date, "");
}

TEST(ChatTemplateFamilies, GemmaMarkersAreItsTurnTokens) {
  const Loaded l = Load("gemma3-like.gguf");
  const Tokenizer& t = *l.tokenizer;
  const ChatFormat format = chat_format_from_gguf(*l.file, t);
  const Ids ids = tokenize_chat(t, render_chat(format.family, {{"system", "S"}, {"user", "Hello"}}, format.options),
                                /*add_bos=*/true);
  // <bos>, then no space prefix anywhere.
  EXPECT_EQ(ids, Concat({{2, 105}, Plain(t, "user\nS\n\nHello"), {106}, Plain(t, "\n"), {105}, Plain(t, "model\n")}));
}

TEST(ChatTemplateFamilies, Phi3MarkersEatTheWhitespaceAfterThem) {
  const Loaded l = Load("phi3-like.gguf");
  const Tokenizer& t = *l.tokenizer;
  const ChatFormat format = chat_format_from_gguf(*l.file, t);
  const Ids ids = tokenize_chat(t, render_chat(format.family, kConversation, format.options), /*add_bos=*/true);
  constexpr int32_t kAssistant = 32001, kSystem = 32006, kEnd = 32007, kUser = 32010;
  // As Phi-3's rstrip added tokens tokenize the rendered text: no "\n"
  // after any marker (add_bos is false in Phi-3's file).
  EXPECT_EQ(ids, Concat({{kSystem}, Plain(t, "Be brief."), {kEnd, kUser}, Plain(t, "Hi"), {kEnd, kAssistant},
                         Plain(t, "Hello."), {kEnd, kUser}, Plain(t, "Why?"), {kEnd, kAssistant}}));
  // A marker that is not a token (a role Phi-3 lacks) stays text, newline included.
  const Ids tool = tokenize_chat(t, render_chat(format.family, {{"tool", "x"}}, format.options), false);
  EXPECT_EQ(t.decode(tool, {.render_special = true}), "<|tool|>\nx<|end|><|assistant|>");
}

TEST(ChatTemplateFamilies, Qwen3PromptLeavesOutEarlierReasoning) {
  const Loaded l = Load("qwen3-like.gguf");
  const Tokenizer& t = *l.tokenizer;
  const ChatFormat format = chat_format_from_gguf(*l.file, t);
  const std::vector<ChatMessage> thought = {{"user", "Hi"}, {"assistant", "<think>\nx\n</think>\n\nHello."},
                                            {"user", "Why?"}};
  const Ids ids = tokenize_chat(t, render_chat(format.family, thought, format.options), /*add_bos=*/true);
  // The earlier answer's reasoning is gone from the prompt.
  EXPECT_EQ(t.decode(ids, {.render_special = true}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), t.eos_id()), 3);
  // A user's "<|im_end|>" stays text; "<think>" is an added word of Qwen3's
  // vocabulary (not special), so it is that token wherever it appears, as
  // Hugging Face tokenizes it.
  const Ids typed = tokenize_chat(t, render_chat(format.family, {{"user", "<|im_end|><think>"}}, format.options), true);
  EXPECT_EQ(std::count(typed.begin(), typed.end(), t.eos_id()), 1);
  EXPECT_EQ(std::count(typed.begin(), typed.end(), t.eos_id() + 22), 1);  // <think>: <|im_end|> + 22
  EXPECT_EQ(t.token_text(t.eos_id() + 22), "<think>");
}

TEST(ChatTemplateFamilies, Llama32PromptTokens) {
  const Loaded l = Load("llama32-like.gguf");
  const Tokenizer& t = *l.tokenizer;
  ChatFormat format = chat_format_from_gguf(*l.file, t);
  format.options.today = "26 Jul 2024";
  const Ids ids = tokenize_chat(t, render_chat(format.family, {{"user", "Hello"}}, format.options), true);
  constexpr int32_t kBos = 768, kStart = 774, kEnd = 775, kEot = 777;
  EXPECT_EQ(ids, Concat({{kBos, kStart}, Plain(t, "system"), {kEnd},
                         Plain(t, "\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"),
                         {kEot, kStart}, Plain(t, "user"), {kEnd}, Plain(t, "\n\nHello"), {kEot, kStart},
                         Plain(t, "assistant"), {kEnd}, Plain(t, "\n\n")}));
}

}  // namespace
}  // namespace baton
