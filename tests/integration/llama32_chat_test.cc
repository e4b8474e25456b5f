// Llama 3.2 chat end to end through a real EdgeServer: a synthetic llama
// model carrying the Llama-3.2-style vocabulary and chat template of
// tests/data/vocab/llama32-like.gguf (its 256 special tokens in Llama 3's
// order, EOS = <|eot_id|>, the "Cutting Knowledge Date" template).
// What must hold:
//   - the prompt the agent builds from GenerateRequest.chat is exactly the
//     template's rendering, tokenized with the markers as their special
//     tokens (checked on the session file's token list): BOS, the system
//     header with the knowledge date and today's date, the turns, the
//     assistant header; a later turn starts by closing the answer with
//     <|eot_id|> and adds no second system header;
//   - <|eot_id|> stops the turn (finish reason EOS) and is neither shown nor
//     kept. The random model would rarely pick it, so the test makes it the
//     greedy choice at one step: the output row of <|eot_id|> becomes c times
//     the row of the token greedy decoding picks there, with c chosen from
//     the logits of the steps before so that it wins there and nowhere
//     earlier (margins well above the F16 rounding of the row and the KV
//     codec's error).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/engine/engine.h"
#include "common/gguf/gguf_file.h"
#include "common/gguf/gguf_writer.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/model/model_synth.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/check.h"
#include "common/util/fp16.h"
#include "edge_decode/http/chat_template.h"
#include "edge_decode/store/session_file.h"
#include "tests/support/edge_test_env.h"
#include "tests/unit/tokenizer_test_util.h"

namespace baton {
namespace {

using namespace edge_test;  // NOLINT
using Ids = std::vector<int32_t>;

constexpr int32_t kBos = 768, kStartHeader = 774, kEndHeader = 775, kEom = 776, kEot = 777;
constexpr uint64_t kFirstSeed = 32;  // the synthetic weights' first seed
const std::vector<ChatMessage> kFirstTurn = {{"system", "Be brief."}, {"user", "Hello, model."}};
const std::vector<ChatMessage> kSecondTurn = {{"user", "Why?"}};

// The synthetic tiny Llama 3 shape with the vocabulary's 1024 tokens and an
// output matrix of its own (untied), written with the vocabulary's
// tokenizer.* metadata in place of the synthetic one; `seed` the weights'.
absl::Status WriteLlama32Model(const std::string& dir, const std::string& path, uint64_t seed) {
  SynthShape shape = *find_synth_shape("tiny-llama3");
  shape.name = "tiny-llama32-chat";
  shape.n_vocab = 1024;
  shape.tied_embeddings = false;
  SynthOptions options;
  options.seed = seed;
  options.n_threads = 1;
  const std::string base_path = dir + "/base.gguf";
  BATON_RETURN_IF_ERROR(synthesize_model(shape, options, base_path));
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> base, GgufFile::Open(base_path));
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> vocab,
                         GgufFile::Open(testing_tokenizer::VocabPath("llama32-like.gguf")));
  GgufWriter writer;
  for (const auto& [key, value] : base->metadata()) {
    if (!key.starts_with("tokenizer.")) writer.set(key, value);
  }
  for (const auto& [key, value] : vocab->metadata()) {
    if (key.starts_with("tokenizer.")) writer.set(key, value);
  }
  for (const GgufTensorInfo& tensor : base->tensors()) {
    writer.add_tensor_copy(tensor.name, tensor.type, tensor.dims, tensor.data);
  }
  return writer.write(path);
}

// Greedy decoding on the CPU engine: the tokens and each step's logits.
struct Trajectory {
  Ids tokens;
  std::vector<std::vector<float>> logits;
};

absl::StatusOr<Trajectory> Greedy(const std::string& path, const Ids& prompt, int steps) {
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(path));
  Engine engine(*model, EngineOptions{.n_threads = 1});
  std::unique_ptr<KvCache> kv = engine.new_f32_kv_cache(static_cast<int64_t>(prompt.size()) + steps + 1);
  std::vector<float> logits;
  BATON_RETURN_IF_ERROR(engine.prefill(prompt, *kv, &logits, nullptr));
  Trajectory out;
  for (int step = 0; step < steps; ++step) {
    const int32_t token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.tokens.push_back(token);
    out.logits.push_back(logits);
    BATON_RETURN_IF_ERROR(engine.decode_step(token, *kv, &logits));
  }
  return out;
}

// Step s >= 1 and factor c such that c * logit[s][t_s] beats every logit
// of step s by a margin and stays below the winner of every earlier step by
// a margin; steps up to s must have a clear winner (so the agent, whose KV
// codec rounds differently, takes the same path). nullopt when none does.
struct Plan {
  int step;
  int32_t token;
  float factor;
};
std::optional<Plan> PlanStop(const Trajectory& tr) {
  constexpr float kMargin = 0.05f;  // logit units; F16 rounding of a row is ~1e-3 of it
  auto runner_up = [](const std::vector<float>& logits, int32_t top) {
    float second = -INFINITY;
    for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) {
      if (i != top && i != kEot) second = std::max(second, logits[i]);
    }
    return second;
  };
  for (int s = 1; s < static_cast<int>(tr.tokens.size()); ++s) {
    if (tr.logits[s - 1][tr.tokens[s - 1]] - runner_up(tr.logits[s - 1], tr.tokens[s - 1]) < kMargin) break;
    const int32_t j = tr.tokens[s];
    const float top = tr.logits[s][j];
    if (j >= kBos || top <= 0.0f || top - runner_up(tr.logits[s], j) < kMargin) continue;
    float high = INFINITY;  // c below every earlier winner / logit of j there
    for (int r = 0; r < s; ++r) {
      const float before = tr.logits[r][j];
      if (before > 0.0f) high = std::min(high, (tr.logits[r][tr.tokens[r]] - kMargin) / before);
    }
    const float low = 1.0f + kMargin / top;  // (c - 1) * top > margin
    if (!(high > low)) continue;
    return Plan{s, j, std::isinf(high) ? low + 1.0f : (low + high) / 2};
  }
  return std::nullopt;
}

// Sets output.weight row kEot to factor * row `token` (F16).
absl::Status ScaleEotRow(const std::string& in, const std::string& out, int32_t token, float factor) {
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(in));
  GgufWriter writer;
  for (const auto& [key, value] : file->metadata()) writer.set(key, value);
  for (const GgufTensorInfo& tensor : file->tensors()) {
    std::vector<uint8_t> bytes(tensor.data, tensor.data + tensor.n_bytes);
    if (tensor.name == "output.weight") {
      if (tensor.type != GgmlType::kF16) return absl::InternalError("output.weight is not F16");
      const int64_t row = tensor.dims[0];
      auto* w = reinterpret_cast<uint16_t*>(bytes.data());
      for (int64_t i = 0; i < row; ++i) {
        w[kEot * row + i] = fp32_to_fp16(factor * fp16_to_fp32(w[token * row + i]));
      }
    }
    writer.add_tensor_copy(tensor.name, tensor.type, tensor.dims, bytes.data());
  }
  return writer.write(out);
}

Ids PromptTokens(const Tokenizer& tokenizer, const ChatFormat& format, const std::vector<ChatMessage>& messages,
                 bool continuation) {
  ChatRenderOptions options = format.options;
  options.continuation = continuation;
  return tokenize_chat(tokenizer, render_chat(format.family, messages, options), !continuation);
}

v1::GenerateRequest ChatRequest(const std::vector<ChatMessage>& messages) {
  v1::GenerateRequest request = greedy_request({}, "chat", v1::SPLIT_POLICY_LOCAL, 16);
  request.clear_tokens();
  for (const ChatMessage& message : messages) {
    v1::ChatTurnMessage* m = request.mutable_chat()->add_messages();
    m->set_role(message.role);
    m->set_content(message.content);
  }
  return request;
}

TEST(Llama32ChatTest, PromptIsTheTemplatesAndEotIdEndsTheTurn) {
  const std::string dir = testing::make_temp_dir("llama32-chat");
  const std::string plain_path = dir + "/plain.gguf";
  const std::string model_path = dir + "/llama32.gguf";
  ASSERT_TRUE(WriteLlama32Model(dir, plain_path, kFirstSeed).ok());

  auto file = GgufFile::Open(plain_path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto tokenizer_or = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tokenizer_or.ok()) << tokenizer_or.status();
  const Tokenizer& tokenizer = **tokenizer_or;
  const ChatFormat format = chat_format_from_gguf(**file, tokenizer);
  ASSERT_EQ(format.family, ChatTemplateFamily::kLlama3);
  ASSERT_EQ(format.options.knowledge_date, "Cutting Knowledge Date: December 2023");
  EXPECT_TRUE(tokenizer.is_eog(kEot) && tokenizer.is_eog(kEom) && tokenizer.is_eog(kBos + 1));

  // The prompt as the template renders it (today's date, as the agent uses).
  const Ids prompt = PromptTokens(tokenizer, format, kFirstTurn, false);
  ASSERT_GT(prompt.size(), 10u);
  EXPECT_EQ((Ids{prompt[0], prompt[1]}), (Ids{kBos, kStartHeader}));
  const std::string shown = tokenizer.decode(prompt, {.render_special = true});
  EXPECT_TRUE(shown.starts_with("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                                "Cutting Knowledge Date: December 2023\nToday Date: "))
      << shown;
  EXPECT_TRUE(shown.ends_with("\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello, model."
                              "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"))
      << shown;

  // Make <|eot_id|> the greedy choice at one step of the answer. The prompt
  // holds today's date (the agent renders it so too), so whether a given
  // model's answer has such a step changes with the day (seed 32 had none on
  // 8 Dec 2026): the first of kSeeds models, the same weights on every day
  // where the first has one, that has one is taken.
  constexpr uint64_t kSeeds = 16;
  std::string plain = plain_path;
  absl::StatusOr<Trajectory> trajectory;
  std::optional<Plan> plan;
  for (uint64_t seed = kFirstSeed; seed < kFirstSeed + kSeeds && !plan.has_value(); ++seed) {
    if (seed != kFirstSeed) {
      plain = dir + "/plain-" + std::to_string(seed) + ".gguf";
      ASSERT_TRUE(WriteLlama32Model(dir, plain, seed).ok());
    }
    trajectory = Greedy(plain, prompt, 10);
    ASSERT_TRUE(trajectory.ok()) << trajectory.status();
    plan = PlanStop(*trajectory);
  }
  ASSERT_TRUE(plan.has_value()) << "no step where <|eot_id|> can be made the greedy choice, " << kSeeds << " seeds";
  ASSERT_TRUE(ScaleEotRow(plain, model_path, plan->token, plan->factor).ok());
  const Ids answer(trajectory->tokens.begin(), trajectory->tokens.begin() + plan->step);
  std::printf("prompt %zu tokens; <|eot_id|> made the greedy choice at answer step %d (row of token %d x %.3f)\n",
              prompt.size(), plan->step, plan->token, plan->factor);

  EdgeServiceOptions options = edge_options("");
  options.sessions_dir = dir + "/sessions";
  std::filesystem::create_directories(options.sessions_dir);
  std::unique_ptr<Edge> edge = start_edge(model_path, options);
  const GenerateResult first = generate(*edge->stub, ChatRequest(kFirstTurn));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_EQ(first.stats.finish_reason(), v1::FINISH_REASON_EOS) << "<|eot_id|> did not end the turn";
  EXPECT_EQ(std::vector<int32_t>(first.tokens.begin(), first.tokens.end()), answer);

  auto model = Model::Load(model_path);
  ASSERT_TRUE(model.ok()) << model.status();
  auto fingerprint = model_fingerprint(**model);
  ASSERT_TRUE(fingerprint.ok()) << fingerprint.status();
  auto session_tokens_on_disk = [&]() -> Ids {
    auto info = read_session_file_header(options.sessions_dir + "/chat.session", *fingerprint);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? Ids(info->header.tokens().begin(), info->header.tokens().end()) : Ids{};
  };
  Ids expected = prompt;
  expected.insert(expected.end(), answer.begin(), answer.end());
  EXPECT_EQ(session_tokens_on_disk(), expected);  // the answer without <|eot_id|>

  // The next turn closes the answer with <|eot_id|>; no second system header.
  const GenerateResult second = generate(*edge->stub, ChatRequest(kSecondTurn));
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  const Ids next = PromptTokens(tokenizer, format, kSecondTurn, true);
  EXPECT_EQ(tokenizer.decode(next, {.render_special = true}),
            "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  expected.insert(expected.end(), next.begin(), next.end());
  expected.insert(expected.end(), second.tokens.begin(), second.tokens.end());
  EXPECT_EQ(session_tokens_on_disk(), expected);
  edge->stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace baton
