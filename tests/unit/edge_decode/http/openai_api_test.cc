// The OpenAI-compatible API's pure parts (edge_decode/http/openai_api.h,
// chat_template.h, edge_metrics.h). What must hold: request fields map to
// the GenerateRequest the gRPC path takes (sampling, stop, policy, codec,
// session); malformed requests are INVALID_ARGUMENT naming the field;
// answers and chunks have OpenAI's shape with usage and finish_reason; gRPC
// codes map to the agreed HTTP codes with Retry-After; chat templates are
// recognised by their markers and only template markers become control
// tokens (user text cannot inject them).
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/gguf/gguf_file.h"
#include "common/gguf/gguf_writer.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/unicode.h"
#include "common/util/metrics.h"
#include "edge_decode/http/chat_template.h"
#include "edge_decode/edge_metrics.h"
#include "edge_decode/http/openai_api.h"

namespace baton {
namespace {

using Json = nlohmann::json;

OpenAiRequest parse_ok(OpenAiEndpoint endpoint, const std::string& body) {
  absl::StatusOr<OpenAiRequest> parsed = parse_openai_request(endpoint, body);
  EXPECT_TRUE(parsed.ok()) << parsed.status() << " for " << body;
  return parsed.ok() ? *parsed : OpenAiRequest{};
}

absl::Status parse_error(OpenAiEndpoint endpoint, const std::string& body) {
  absl::StatusOr<OpenAiRequest> parsed = parse_openai_request(endpoint, body);
  EXPECT_FALSE(parsed.ok()) << "accepted " << body;
  return parsed.ok() ? absl::OkStatus() : parsed.status();
}

TEST(OpenAiRequestTest, CompletionFieldsMapToTheGenerateRequest) {
  const OpenAiRequest request = parse_ok(OpenAiEndpoint::kCompletions, R"({
    "model": "m", "prompt": "Once upon", "max_tokens": 7, "temperature": 0, "top_p": 0.9,
    "seed": 42, "stop": ["\n\n", "END"], "stream": true, "stream_options": {"include_usage": true},
    "user": "ignored", "presence_penalty": 0,
    "baton": {"policy": "cloud", "pack": "docs", "session": "s1", "codec": "int8", "top_k": 40,
              "min_p": 0.05, "repetition_penalty": 1.1}})");
  EXPECT_EQ(request.model, "m");
  EXPECT_TRUE(request.stream);
  EXPECT_TRUE(request.include_usage);
  absl::StatusOr<v1::GenerateRequest> generate = to_generate_request(request);
  ASSERT_TRUE(generate.ok()) << generate.status();
  EXPECT_EQ(generate->text(), "Once upon");
  EXPECT_EQ(generate->max_tokens(), 7u);
  ASSERT_TRUE(generate->sampling().has_temperature());
  EXPECT_EQ(generate->sampling().temperature(), 0.0f);
  EXPECT_FLOAT_EQ(generate->sampling().top_p(), 0.9f);
  ASSERT_TRUE(generate->sampling().has_seed());
  EXPECT_EQ(generate->sampling().seed(), 42u);
  EXPECT_EQ(generate->sampling().top_k(), 40u);
  EXPECT_FLOAT_EQ(generate->sampling().min_p(), 0.05f);
  EXPECT_FLOAT_EQ(generate->sampling().repetition_penalty(), 1.1f);
  ASSERT_EQ(generate->stop_size(), 2);
  EXPECT_EQ(generate->stop(0), "\n\n");
  EXPECT_EQ(generate->stop(1), "END");
  EXPECT_EQ(generate->policy(), v1::SPLIT_POLICY_CLOUD);
  EXPECT_EQ(generate->pack_id(), "docs");
  EXPECT_EQ(generate->session_id(), "s1");
  EXPECT_EQ(generate->codec().codec(), v1::KV_CODEC_INT8);
}

TEST(OpenAiRequestTest, DefaultsLeaveTheAgentsDefaults) {
  const OpenAiRequest request = parse_ok(OpenAiEndpoint::kCompletions, R"({"prompt": "hi", "seed": -1})");
  absl::StatusOr<v1::GenerateRequest> generate = to_generate_request(request);
  ASSERT_TRUE(generate.ok());
  EXPECT_EQ(generate->max_tokens(), 0u);
  EXPECT_FALSE(generate->sampling().has_temperature());
  EXPECT_FALSE(generate->sampling().has_seed());  // -1: random, as llama.cpp clients mean it
  EXPECT_EQ(generate->policy(), v1::SPLIT_POLICY_UNSPECIFIED);
  EXPECT_FALSE(generate->has_codec());
  EXPECT_FALSE(request.stream);
}

TEST(OpenAiRequestTest, PromptFormsAndStopAsString) {
  EXPECT_EQ(parse_ok(OpenAiEndpoint::kCompletions, R"({"prompt": ["one"]})").prompt, "one");
  const OpenAiRequest tokens = parse_ok(OpenAiEndpoint::kCompletions, R"({"prompt": [1, 15, 300]})");
  EXPECT_EQ(tokens.prompt_tokens, (std::vector<uint32_t>{1, 15, 300}));
  absl::StatusOr<v1::GenerateRequest> generate = to_generate_request(tokens);
  ASSERT_TRUE(generate.ok());
  ASSERT_TRUE(generate->has_tokens());
  EXPECT_EQ(generate->tokens().ids_size(), 3);
  EXPECT_EQ(parse_ok(OpenAiEndpoint::kCompletions, R"({"prompt": [[4, 5]]})").prompt_tokens.size(), 2u);
  EXPECT_EQ(parse_ok(OpenAiEndpoint::kCompletions, R"({"prompt": "p", "stop": "x"})").stop,
            (std::vector<std::string>{"x"}));
  EXPECT_EQ(parse_ok(OpenAiEndpoint::kCompletions, R"({"prompt": "p", "max_completion_tokens": 3})").max_tokens, 3u);
  const OpenAiRequest full_codec =
      parse_ok(OpenAiEndpoint::kCompletions, R"({"prompt": "p", "baton": {"codec": "int4-pc-g32-z3"}})");
  absl::StatusOr<v1::GenerateRequest> with_codec = to_generate_request(full_codec);
  ASSERT_TRUE(with_codec.ok()) << with_codec.status();
  EXPECT_EQ(with_codec->codec().codec(), v1::KV_CODEC_INT4);
  EXPECT_EQ(with_codec->codec().key_axis(), v1::KEY_AXIS_PER_CHANNEL);
  EXPECT_EQ(with_codec->codec().zstd_level(), 3);
  // "auto": the agent picks per request (baton-edge --codec auto).
  absl::StatusOr<v1::GenerateRequest> automatic = to_generate_request(
      parse_ok(OpenAiEndpoint::kCompletions, R"({"prompt": "p", "baton": {"codec": "auto"}})"));
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(automatic->codec().codec(), v1::KV_CODEC_AUTO);
}

TEST(OpenAiRequestTest, ChatMessagesAcceptTextPartsAndDeveloperRole) {
  const OpenAiRequest request = parse_ok(OpenAiEndpoint::kChatCompletions, R"({"messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null}]})");
  ASSERT_EQ(request.messages.size(), 3u);
  EXPECT_EQ(request.messages[0].role, "system");
  EXPECT_EQ(request.messages[1].content, "Hello there");
  EXPECT_EQ(request.messages[2].content, "");
}

TEST(OpenAiRequestTest, MalformedRequestsNameTheField) {
  struct Case {
    OpenAiEndpoint endpoint;
    const char* body;
    const char* names;
  };
  const Case cases[] = {
      {OpenAiEndpoint::kCompletions, "{not json", "not valid JSON"},
      {OpenAiEndpoint::kCompletions, "[1, 2]", "JSON object"},
      {OpenAiEndpoint::kCompletions, R"({"model": "m"})", "'prompt' is required"},
      {OpenAiEndpoint::kCompletions, R"({"prompt": ""})", "'prompt' is empty"},
      {OpenAiEndpoint::kCompletions, R"({"prompt": ["a", "b"]})", "one prompt per request"},
      {OpenAiEndpoint::kCompletions, R"({"prompt": [1, -2]})", "prompt[1]"},
      {OpenAiEndpoint::kCompletions, R"({"prompt": "p", "max_tokens": "ten"})", "'max_tokens'"},
      {OpenAiEndpoint::kCompletions, R"({"prompt": "p", "max_tokens": 0})", "'max_tokens'"},
      {OpenAiEndpoint::kCompletions, R"({"prompt": "p", "temperature": "hot"})", "'temperature' must be a number"},
      {OpenAiEndpoint::kCompletions, R"({"prompt": "p", "seed": 1.5})", "'seed'"},
      {OpenAiEndpoint::kCompletions, R"({"prompt": "p", "n": 2})", "'n'"},
      {OpenAiEndpoint::kCompletions, R"({"prompt": "p", "stop": [1]})", "stop[0]"},
      {OpenAiEndpoint::kCompletions, R"({"prompt": "p", "stream": "yes"})", "'stream'"},
      {OpenAiEndpoint::kCompletions, R"({"prompt": "p", "baton": {"policy": "mars"}})", "auto, local, cloud"},
      {OpenAiEndpoint::kCompletions, R"({"prompt": "p", "baton": {"top_k": -1}})", "'baton.top_k'"},
      {OpenAiEndpoint::kCompletions, R"({"prompt": "p", "baton": 3})", "'baton'"},
      {OpenAiEndpoint::kChatCompletions, R"({"messages": []})", "'messages' is empty"},
      {OpenAiEndpoint::kChatCompletions, R"({"messages": "hi"})", "'messages'"},
      {OpenAiEndpoint::kChatCompletions, R"({"messages": [{"content": "hi"}]})", "messages[0].role"},
      {OpenAiEndpoint::kChatCompletions, R"({"messages": [{"role": "user", "content": 5}]})",
       "messages[0].content"},
      {OpenAiEndpoint::kChatCompletions,
       R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       "only \"text\" parts"},
  };
  for (const Case& c : cases) {
    const absl::Status status = parse_error(c.endpoint, c.body);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_NE(std::string(status.message()).find(c.names), std::string::npos)
        << c.body << " -> " << status.message();
  }
  std::string many_stops = R"({"prompt": "p", "stop": [)";
  for (int i = 0; i < 17; ++i) many_stops += std::string(i ? "," : "") + "\"s\"";
  many_stops += "]}";
  EXPECT_NE(std::string(parse_error(OpenAiEndpoint::kCompletions, many_stops).message()).find("at most 16"),
            std::string::npos);
  const OpenAiRequest bad_codec = parse_ok(OpenAiEndpoint::kCompletions, R"({"prompt": "p", "baton": {"codec": "int3"}})");
  absl::StatusOr<v1::GenerateRequest> generate = to_generate_request(bad_codec);
  ASSERT_FALSE(generate.ok());
  EXPECT_EQ(generate.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(generate.status().message()).find("baton.codec"), std::string::npos);
}

v1::Stats sample_stats() {
  v1::Stats stats;
  stats.set_prompt_tokens(11);
  stats.set_generated_tokens(5);
  stats.set_ttft_ms(250);
  stats.set_decode_tokens_per_s(20);
  stats.set_finish_reason(v1::FINISH_REASON_LENGTH);
  stats.mutable_plan()->set_place(v1::PREFILL_PLACE_CLOUD);
  stats.set_kv_wire_bytes(4096);
  return stats;
}

TEST(OpenAiAnswerTest, CompletionAnswerHasChoicesUsageAndFinishReason) {
  const OpenAiAnswerInfo info{OpenAiEndpoint::kCompletions, "cmpl-1", 1700000000, "tiny"};
  const Json answer = Json::parse(openai_answer_json(info, "hello", sample_stats()));
  EXPECT_EQ(answer["id"], "cmpl-1");
  EXPECT_EQ(answer["object"], "text_completion");
  EXPECT_EQ(answer["created"], 1700000000);
  EXPECT_EQ(answer["model"], "tiny");
  EXPECT_EQ(answer["choices"][0]["text"], "hello");
  EXPECT_EQ(answer["choices"][0]["index"], 0);
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(answer["usage"]["prompt_tokens"], 11);
  EXPECT_EQ(answer["usage"]["completion_tokens"], 5);
  EXPECT_EQ(answer["usage"]["total_tokens"], 16);
  EXPECT_EQ(answer["baton"]["prefill"], "cloud");
  EXPECT_EQ(answer["baton"]["kv_wire_bytes"], 4096);
}

TEST(OpenAiAnswerTest, ChatAnswerAndChunks) {
  const OpenAiAnswerInfo info{OpenAiEndpoint::kChatCompletions, "chatcmpl-1", 5, "tiny"};
  v1::Stats stats = sample_stats();
  stats.set_finish_reason(v1::FINISH_REASON_EOS);
  const Json answer = Json::parse(openai_answer_json(info, "hi!", stats));
  EXPECT_EQ(answer["object"], "chat.completion");
  EXPECT_EQ(answer["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(answer["choices"][0]["message"]["content"], "hi!");
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "stop");

  const Json first = Json::parse(openai_chunk_json(info, "", std::nullopt, true));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const Json piece = Json::parse(openai_chunk_json(info, "hi", std::nullopt));
  EXPECT_EQ(piece["choices"][0]["delta"]["content"], "hi");
  EXPECT_FALSE(piece["choices"][0]["delta"].contains("role"));
  const Json last = Json::parse(openai_chunk_json(info, "", v1::FINISH_REASON_STOP));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  const Json usage = Json::parse(openai_usage_chunk_json(info, stats));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 16);
  EXPECT_EQ(sse_event("{}"), "data: {}\n\n");
}

TEST(OpenAiAnswerTest, FinishReasons) {
  EXPECT_STREQ(openai_finish_reason(v1::FINISH_REASON_EOS), "stop");
  EXPECT_STREQ(openai_finish_reason(v1::FINISH_REASON_STOP), "stop");
  EXPECT_STREQ(openai_finish_reason(v1::FINISH_REASON_LENGTH), "length");
  EXPECT_STREQ(openai_finish_reason(v1::FINISH_REASON_CONTEXT_FULL), "length");
}

TEST(OpenAiAnswerTest, ModelsAndIds) {
  const Json models = Json::parse(openai_models_json("tiny", 7));
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_EQ(new_openai_id(OpenAiEndpoint::kCompletions).rfind("cmpl-", 0), 0u);
  EXPECT_EQ(new_openai_id(OpenAiEndpoint::kChatCompletions).rfind("chatcmpl-", 0), 0u);
  EXPECT_NE(new_openai_id(OpenAiEndpoint::kCompletions), new_openai_id(OpenAiEndpoint::kCompletions));
}

TEST(OpenAiErrorTest, GrpcCodesMapToHttpCodes) {
  struct Case {
    absl::Status status;
    uint32_t retry_after_ms;
    int http;
    int retry_after_s;
    const char* type;
  };
  const Case cases[] = {
      {absl::InvalidArgumentError("temperature = -1"), 0, 400, 0, "invalid_request_error"},
      {absl::UnauthenticatedError("no token"), 0, 401, 0, "invalid_request_error"},
      {absl::NotFoundError("pack x"), 0, 404, 0, "not_found_error"},
      {absl::ResourceExhaustedError("session needs 9000 tokens; this device fits 6144 with codec int4"), 0, 413, 0,
       "invalid_request_error"},
      {absl::ResourceExhaustedError("16 Generate calls are already waiting (the limit); retry later"), 1000, 429, 1,
       "rate_limit_error"},
      {absl::UnavailableError("the edge agent is LOADING"), 2500, 503, 3, "service_unavailable"},
      {absl::UnavailableError("cloud unreachable"), 0, 503, 0, "service_unavailable"},
      {absl::FailedPreconditionError("fingerprint differs"), 0, 500, 0, "server_error"},
      {absl::InternalError("bug"), 0, 500, 0, "server_error"},
  };
  for (const Case& c : cases) {
    const HttpError error = http_error_from_status(c.status, c.retry_after_ms);
    EXPECT_EQ(error.http_status, c.http) << c.status;
    EXPECT_EQ(error.retry_after_s, c.retry_after_s) << c.status;
    const Json body = Json::parse(error.body);
    EXPECT_EQ(body["error"]["type"], c.type) << c.status;
    EXPECT_EQ(body["error"]["message"], std::string(c.status.message()));
    EXPECT_TRUE(body["error"].contains("param"));
    EXPECT_TRUE(body["error"].contains("code"));
  }
}

TEST(ChatTemplateTest, FamiliesAreDetectedByTheirMarkers) {
  EXPECT_EQ(detect_chat_template("{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>"),
            ChatTemplateFamily::kLlama3);
  EXPECT_EQ(detect_chat_template("{% for m in messages %}{{'<|im_start|>' + m.role}}"), ChatTemplateFamily::kChatml);
  EXPECT_EQ(detect_chat_template("{{ bos_token }}[INST] {{ m.content }} [/INST]"), ChatTemplateFamily::kMistral);
  EXPECT_EQ(detect_chat_template("{{ '<|user|>\\n' + m.content + eos_token }}"), ChatTemplateFamily::kDefault);
  EXPECT_EQ(detect_chat_template(""), ChatTemplateFamily::kDefault);
}

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Why?"}};

TEST(ChatTemplateTest, RenderedLayouts) {
  ChatRenderOptions options;
  EXPECT_EQ(chat_text(render_chat(ChatTemplateFamily::kLlama3, kConversation, options)),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(chat_text(render_chat(ChatTemplateFamily::kChatml, kConversation, options)),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(chat_text(render_chat(ChatTemplateFamily::kMistral, kConversation, options)),
            "[INST] Be brief.\n\nHi [/INST]Hello.</s>[INST] Why? [/INST]");
  EXPECT_EQ(chat_text(render_chat(ChatTemplateFamily::kDefault, kConversation, options)),
            "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello.</s>\n<|user|>\nWhy?</s>\n"
            "<|assistant|>\n");
}

TEST(ChatTemplateTest, ChatmlDefaultSystemOnlyOnAFirstTurnWithoutOne) {
  ChatRenderOptions options;
  options.default_system = "You are a helpful assistant.";
  const std::vector<ChatMessage> user_only = {{"user", "Hi"}};
  EXPECT_EQ(chat_text(render_chat(ChatTemplateFamily::kChatml, user_only, options)),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  options.continuation = true;  // closes the held answer; no system prompt
  EXPECT_EQ(chat_text(render_chat(ChatTemplateFamily::kChatml, user_only, options)),
            "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat_text(render_chat(ChatTemplateFamily::kLlama3, user_only, options)),
            "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(chat_text(render_chat(ChatTemplateFamily::kDefault, user_only, options)),
            "</s>\n<|user|>\nHi</s>\n<|assistant|>\n");
}

TEST(ChatTemplateTest, ASessionGetsOnlyTheMessagesAfterTheLastAnswer) {
  EXPECT_EQ(new_chat_messages(kConversation, false).size(), 4u);
  const std::vector<ChatMessage> fresh = new_chat_messages(kConversation, true);
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_EQ(fresh[0].content, "Why?");
}

// A byte-level (gpt2) vocabulary with the chatml markers as control tokens.
std::unique_ptr<GgufFile> chatml_vocab_file() {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    std::string c;
    AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(b)), c);
    tokens.push_back(c);
    types.push_back(1);
  }
  tokens.insert(tokens.end(), {"<|im_start|>", "<|im_end|>", "<|endoftext|>"});
  types.insert(types.end(), {3, 3, 3});
  GgufWriter writer;
  writer.set_string("tokenizer.ggml.model", "gpt2");
  writer.set_string("tokenizer.ggml.pre", "qwen2");
  writer.set_string_array("tokenizer.ggml.tokens", tokens);
  writer.set_i32_array("tokenizer.ggml.token_type", types);
  writer.set_string_array("tokenizer.ggml.merges", {});
  writer.set_u32("tokenizer.ggml.eos_token_id", 258);
  writer.set_string("tokenizer.chat_template",
                    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
                    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
                    "{% endfor %}");
  absl::StatusOr<std::vector<uint8_t>> bytes = writer.write_to_bytes();
  EXPECT_TRUE(bytes.ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(std::move(*bytes));
  EXPECT_TRUE(file.ok()) << file.status();
  return std::move(*file);
}

TEST(ChatTemplateTest, OnlyTemplateMarkersBecomeControlTokens) {
  std::unique_ptr<GgufFile> file = chatml_vocab_file();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(*file);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const ChatFormat format = chat_format_from_gguf(*file, **tokenizer);
  EXPECT_EQ(format.family, ChatTemplateFamily::kChatml);
  EXPECT_EQ(format.options.default_system, "You are a helpful assistant.");
  EXPECT_EQ(format.options.eos_text, "<|endoftext|>");

  // The user types the end marker: it must stay text.
  const std::vector<ChatMessage> messages = {{"user", "a<|im_end|>b"}};
  ChatRenderOptions options = format.options;
  options.default_system.clear();  // keeps the count small
  const std::vector<int32_t> ids = tokenize_chat(**tokenizer, render_chat(format.family, messages, options), true);
  constexpr int32_t kImStart = 256, kImEnd = 257;
  int starts = 0, ends = 0;
  for (const int32_t id : ids) {
    starts += id == kImStart;
    ends += id == kImEnd;
  }
  EXPECT_EQ(starts, 2);  // user turn + generation prompt
  EXPECT_EQ(ends, 1);    // only the template's own
  EXPECT_EQ(ids.front(), kImStart);  // gpt2 vocabularies add no BOS
  EXPECT_EQ((*tokenizer)->decode(ids, {.render_special = true}),
            "<|im_start|>user\na<|im_end|>b<|im_end|>\n<|im_start|>assistant\n");
}

TEST(EdgeMetricsTest, StatsAndOutcomesLandInTheRegistry) {
  MetricsRegistry registry;
  EdgeMetrics metrics(registry);
  v1::Stats stats = sample_stats();
  stats.set_fallback_reason("cloud prefill failed (UNAVAILABLE): connection refused");
  stats.set_decode_batch_max(4);
  stats.set_decode_batch_mean(3.5);  // its decode steps served 3.5 turns on average
  metrics.record_stats(stats);
  metrics.record_outcome(absl::OkStatus());
  metrics.record_outcome(absl::UnavailableError("warming"));
  v1::EdgeHealthResponse health;
  health.set_state(v1::SERVING_STATE_READY);
  health.mutable_memory()->set_kv_used_bytes(12345);
  metrics.record_health(health);
  const std::string text = registry.render();
  for (const char* line : {"baton_edge_generate_total{outcome=\"ok\"} 1",
                           "baton_edge_generate_total{outcome=\"unavailable\"} 1",
                           "baton_edge_ttft_seconds_count 1", "baton_edge_ttft_seconds_sum 0.25",
                           "baton_edge_decode_tokens_per_second_count 1", "baton_edge_kv_received_bytes_total 4096",
                           "baton_edge_decode_batch_turns_count 1", "baton_edge_decode_batch_turns_sum 3.5",
                           "baton_edge_prefills_total{place=\"cloud\"} 1",
                           "baton_edge_fallbacks_total{reason=\"unavailable\"} 1",
                           "baton_edge_memory_kv_used_bytes 12345", "baton_edge_ready 1"}) {
    EXPECT_NE(text.find(std::string(line) + "\n"), std::string::npos) << line << "\n" << text;
  }
  EXPECT_EQ(fallback_reason_label("something odd"), "other");
  EXPECT_EQ(outcome_name(absl::StatusCode::kResourceExhausted), "resource_exhausted");
}

}  // namespace
}  // namespace baton
