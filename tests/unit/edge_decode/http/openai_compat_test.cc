// OpenAI compatibility as real clients use it (edge_decode/http/openai_api.h):
// fields Baton cannot honour are INVALID_ARGUMENT naming the field (HTTP 400
// with param and code "unsupported_parameter"), harmless fields clients send
// by default are accepted, frequency/presence penalties and logprobs reach
// the GenerateRequest, and answers carry logprobs in OpenAI's chat and legacy
// completion shapes; /v1/models lists aliases.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "edge_decode/generate/generate_turn.h"
#include "edge_decode/http/openai_api.h"

namespace baton {
namespace {

using Json = nlohmann::json;

absl::StatusOr<OpenAiRequest> parse(OpenAiEndpoint endpoint, const std::string& body) {
  return parse_openai_request(endpoint, body);
}

std::string chat_with(const std::string& extra) {
  return R"({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}])" +
         (extra.empty() ? std::string() : ", " + extra) + "}";
}

std::string completion_with(const std::string& extra) {
  return R"({"model": "llama", "prompt": "hi")" + (extra.empty() ? std::string() : ", " + extra) + "}";
}

TEST(OpenAiCompatTest, UnsupportedFieldsAre400NamingTheField) {
  struct Case {
    OpenAiEndpoint endpoint;
    std::string field;
    std::string json;
  };
  const std::vector<Case> cases = {
      {OpenAiEndpoint::kChatCompletions, "tools",
       R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}])"},
      {OpenAiEndpoint::kChatCompletions, "tool_choice", R"("tool_choice": "required")"},
      {OpenAiEndpoint::kChatCompletions, "functions", R"("functions": [{"name": "f"}])"},
      {OpenAiEndpoint::kChatCompletions, "function_call", R"("function_call": {"name": "f"})"},
      {OpenAiEndpoint::kChatCompletions, "response_format", R"("response_format": {"type": "json_object"})"},
      {OpenAiEndpoint::kChatCompletions, "response_format",
       R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}})"},
      {OpenAiEndpoint::kChatCompletions, "logit_bias", R"("logit_bias": {"50256": -100})"},
      {OpenAiEndpoint::kChatCompletions, "audio", R"("audio": {"voice": "alloy", "format": "wav"})"},
      {OpenAiEndpoint::kChatCompletions, "modalities", R"("modalities": ["text", "audio"])"},
      {OpenAiEndpoint::kChatCompletions, "prediction", R"("prediction": {"type": "content", "content": "x"})"},
      {OpenAiEndpoint::kChatCompletions, "reasoning_effort", R"("reasoning_effort": "high")"},
      {OpenAiEndpoint::kChatCompletions, "n", R"("n": 2)"},
      {OpenAiEndpoint::kCompletions, "echo", R"("echo": true)"},
      {OpenAiEndpoint::kCompletions, "suffix", R"("suffix": "end")"},
      {OpenAiEndpoint::kCompletions, "best_of", R"("best_of": 3)"},
      {OpenAiEndpoint::kCompletions, "n", R"("n": 4)"},
  };
  for (const Case& c : cases) {
    const std::string body =
        c.endpoint == OpenAiEndpoint::kCompletions ? completion_with(c.json) : chat_with(c.json);
    absl::StatusOr<OpenAiRequest> parsed = parse(c.endpoint, body);
    ASSERT_FALSE(parsed.ok()) << "accepted " << body;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_NE(parsed.status().message().find("'" + c.field + "'"), std::string::npos) << parsed.status();
    const HttpError error = http_error_from_status(parsed.status(), 0);
    EXPECT_EQ(error.http_status, 400) << body;
    const Json answer = Json::parse(error.body);
    EXPECT_EQ(answer["error"]["type"], "invalid_request_error") << error.body;
    EXPECT_EQ(answer["error"]["param"], c.field) << error.body;
    EXPECT_EQ(answer["error"]["code"], "unsupported_parameter") << error.body;
  }
}

TEST(OpenAiCompatTest, HarmlessFieldsClientsSendAreAccepted) {
  const std::string chat = chat_with(
      R"("user": "u1", "store": false, "metadata": {"k": "v"}, "service_tier": "auto", "seed": 3,
         "stop": ["x"], "stream": true, "stream_options": {"include_usage": true}, "tools": [],
         "tool_choice": "none", "parallel_tool_calls": true, "response_format": {"type": "text"},
         "logit_bias": {}, "modalities": ["text"], "n": 1, "audio": null, "logprobs": false,
         "prompt_cache_key": "k", "safety_identifier": "s", "some_vendor_field": 1)");
  absl::StatusOr<OpenAiRequest> parsed = parse(OpenAiEndpoint::kChatCompletions, chat);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->logprobs.has_value());
  const std::string completion = completion_with(R"("echo": false, "best_of": 1, "suffix": null, "logprobs": null)");
  parsed = parse(OpenAiEndpoint::kCompletions, completion);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->logprobs.has_value());
}

TEST(OpenAiCompatTest, PenaltiesReachTheSamplingParams) {
  absl::StatusOr<OpenAiRequest> parsed =
      parse(OpenAiEndpoint::kChatCompletions, chat_with(R"("frequency_penalty": 0.5, "presence_penalty": -1.25)"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<v1::GenerateRequest> generate = to_generate_request(*parsed);
  ASSERT_TRUE(generate.ok()) << generate.status();
  EXPECT_FLOAT_EQ(generate->sampling().frequency_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(generate->sampling().presence_penalty(), -1.25f);
  for (const char* bad : {R"("frequency_penalty": 2.5)", R"("presence_penalty": -3)", R"("presence_penalty": "x")"}) {
    parsed = parse(OpenAiEndpoint::kCompletions, completion_with(bad));
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("_penalty"), std::string::npos) << parsed.status();
  }
}

TEST(OpenAiCompatTest, TheAgentChecksAndPassesThePenalties) {
  v1::SamplingParams params;
  params.set_frequency_penalty(0.75f);
  params.set_presence_penalty(-2.0f);
  absl::StatusOr<SamplingParams> out = sampling_params_from_proto(params, 0.8f);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FLOAT_EQ(out->frequency_penalty, 0.75f);
  EXPECT_FLOAT_EQ(out->presence_penalty, -2.0f);
  params.set_presence_penalty(2.01f);
  out = sampling_params_from_proto(params, 0.8f);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("presence_penalty"), std::string::npos) << out.status();
}

TEST(OpenAiCompatTest, LogprobsFieldsReachTheGenerateRequest) {
  absl::StatusOr<OpenAiRequest> parsed =
      parse(OpenAiEndpoint::kChatCompletions, chat_with(R"("logprobs": true, "top_logprobs": 5)"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<v1::GenerateRequest> generate = to_generate_request(*parsed);
  ASSERT_TRUE(generate.ok());
  ASSERT_TRUE(generate->has_logprobs());
  EXPECT_EQ(generate->logprobs(), 5u);
  parsed = parse(OpenAiEndpoint::kChatCompletions, chat_with(R"("logprobs": true)"));
  ASSERT_TRUE(parsed.ok());
  generate = to_generate_request(*parsed);
  ASSERT_TRUE(generate->has_logprobs());
  EXPECT_EQ(generate->logprobs(), 0u);
  parsed = parse(OpenAiEndpoint::kChatCompletions, chat_with(""));
  EXPECT_FALSE(to_generate_request(*parsed)->has_logprobs()) << "no logprobs asked: no work at the agent";
  parsed = parse(OpenAiEndpoint::kCompletions, completion_with(R"("logprobs": 3)"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(to_generate_request(*parsed)->logprobs(), 3u);
  // Out of range or without logprobs: true.
  EXPECT_FALSE(parse(OpenAiEndpoint::kChatCompletions, chat_with(R"("logprobs": true, "top_logprobs": 21)")).ok());
  EXPECT_FALSE(parse(OpenAiEndpoint::kChatCompletions, chat_with(R"("top_logprobs": 2)")).ok());
  EXPECT_FALSE(parse(OpenAiEndpoint::kCompletions, completion_with(R"("logprobs": 21)")).ok());
}

// Two tokens: "He" (id 5, p 0.5) and "é" (id 9, 2 UTF-8 bytes), with alternatives.
OpenAiLogprobs two_tokens() {
  OpenAiLogprobs out;
  out.piece = [](uint32_t id) -> std::string {
    switch (id) {
      case 5: return "He";
      case 9: return "\xc3\xa9";
      default: return "x" + std::to_string(id);
    }
  };
  v1::TokenLogprob first;
  first.set_token_id(5);
  first.set_logprob(std::log(0.5f));
  v1::TopLogprob* top = first.add_top();
  top->set_token_id(5);
  top->set_logprob(std::log(0.5f));
  top = first.add_top();
  top->set_token_id(7);
  top->set_logprob(std::log(0.25f));
  v1::TokenLogprob second;
  second.set_token_id(9);
  second.set_logprob(-0.1f);
  top = second.add_top();
  top->set_token_id(9);
  top->set_logprob(-0.1f);
  top = second.add_top();
  top->set_token_id(3);
  top->set_logprob(-2.5f);
  out.tokens = {first, second};
  return out;
}

TEST(OpenAiCompatTest, ChatLogprobsHaveOpenAisShape) {
  const OpenAiAnswerInfo info{OpenAiEndpoint::kChatCompletions, "chatcmpl-1", 1, "tiny"};
  v1::Stats stats;
  const OpenAiLogprobs logprobs = two_tokens();
  const Json answer = Json::parse(openai_answer_json(info, "Heé", stats, &logprobs));
  const Json& content = answer["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u) << answer.dump();
  EXPECT_EQ(content[0]["token"], "He");
  EXPECT_NEAR(content[0]["logprob"].get<double>(), std::log(0.5), 1e-6);
  EXPECT_EQ(content[0]["bytes"], Json::array({72, 101}));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "x7");
  EXPECT_NEAR(content[0]["top_logprobs"][1]["logprob"].get<double>(), std::log(0.25), 1e-6);
  EXPECT_EQ(content[0]["top_logprobs"][1]["bytes"], Json::array({120, 55}));
  EXPECT_EQ(content[1]["token"], "\xc3\xa9");
  EXPECT_EQ(content[1]["bytes"], Json::array({0xc3, 0xa9}));
  EXPECT_TRUE(answer["choices"][0]["logprobs"]["refusal"].is_null());
  // A stream chunk carries the same shape; without logprobs it is null.
  const Json chunk = Json::parse(openai_chunk_json(info, "Heé", std::nullopt, false, &logprobs));
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["content"].size(), 2u);
  EXPECT_TRUE(Json::parse(openai_chunk_json(info, "x", std::nullopt))["choices"][0]["logprobs"].is_null());
  EXPECT_TRUE(Json::parse(openai_answer_json(info, "x", stats))["choices"][0]["logprobs"].is_null());
}

TEST(OpenAiCompatTest, CompletionLogprobsHaveTheLegacyShape) {
  const OpenAiAnswerInfo info{OpenAiEndpoint::kCompletions, "cmpl-1", 1, "tiny"};
  v1::Stats stats;
  OpenAiLogprobs logprobs = two_tokens();
  const Json answer = Json::parse(openai_answer_json(info, "Heé", stats, &logprobs));
  const Json& out = answer["choices"][0]["logprobs"];
  EXPECT_EQ(out["tokens"], Json::array({"He", "\xc3\xa9"})) << out.dump();
  ASSERT_EQ(out["token_logprobs"].size(), 2u);
  EXPECT_NEAR(out["token_logprobs"][1].get<double>(), -0.1, 1e-6);
  EXPECT_NEAR(out["top_logprobs"][0]["x7"].get<double>(), std::log(0.25), 1e-6);
  EXPECT_NEAR(out["top_logprobs"][1]["x3"].get<double>(), -2.5, 1e-6);
  EXPECT_EQ(out["text_offset"], Json::array({0, 2}));  // bytes: "He" then "é"
  // A stream's later chunk continues the offsets.
  logprobs.text_offset = 10;
  const Json chunk = Json::parse(openai_chunk_json(info, "Heé", std::nullopt, false, &logprobs));
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["text_offset"], Json::array({10, 12}));
}

TEST(OpenAiCompatTest, ACutCharacterIsWrittenAsBytes) {
  // Two byte tokens that are not UTF-8 on their own stay distinct (as OpenAI: "bytes:\\xNN").
  OpenAiLogprobs logprobs;
  logprobs.piece = [](uint32_t id) { return std::string(1, static_cast<char>(id)); };
  v1::TokenLogprob token;
  token.set_token_id(0xc3);
  token.set_logprob(-0.5f);
  for (const uint32_t id : {0xc3u, 0xe2u}) {
    v1::TopLogprob* top = token.add_top();
    top->set_token_id(id);
    top->set_logprob(id == 0xc3u ? -0.5f : -1.0f);
  }
  logprobs.tokens = {token};
  const OpenAiAnswerInfo completion{OpenAiEndpoint::kCompletions, "cmpl-1", 1, "tiny"};
  const Json legacy = Json::parse(openai_answer_json(completion, "", v1::Stats(), &logprobs));
  EXPECT_EQ(legacy["choices"][0]["logprobs"]["tokens"][0], "bytes:\\xc3");
  EXPECT_EQ(legacy["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u) << legacy.dump();
  const OpenAiAnswerInfo chat{OpenAiEndpoint::kChatCompletions, "chatcmpl-1", 1, "tiny"};
  const Json answer = Json::parse(openai_answer_json(chat, "", v1::Stats(), &logprobs));
  const Json& entry = answer["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(entry["token"], "bytes:\\xc3");
  EXPECT_EQ(entry["bytes"], Json::array({0xc3}));
  EXPECT_EQ(entry["top_logprobs"][1]["token"], "bytes:\\xe2");
}

TEST(OpenAiCompatTest, ModelsListTheAliases) {
  const Json models = Json::parse(openai_models_json("baton-tiny", 5, {"gpt-4o-mini", "llama"}));
  ASSERT_EQ(models["data"].size(), 3u);
  EXPECT_EQ(models["data"][0]["id"], "baton-tiny");
  EXPECT_EQ(models["data"][1]["id"], "gpt-4o-mini");
  EXPECT_EQ(models["data"][2]["id"], "llama");
  EXPECT_EQ(models["data"][2]["object"], "model");
}

}  // namespace
}  // namespace baton
