// GenerateRequest.chat on the edge (edge_decode/generate/chat_turn.h): the messages of
// a `baton chat` turn become exactly the tokens the HTTP chat completions
// make of them (render_chat + tokenize_chat, the same template and options),
// BOS only at a conversation's start, the continuation form for a session
// that holds earlier turns, the default layout's "<|user|>" as a stop, and
// unknown roles refused by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "edge_decode/http/chat_template.h"
#include "edge_decode/generate/chat_turn.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

class EdgeChatTurnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::Load(testing::source_dir() + "/deploy/models/baton-tiny-kjv-f16.gguf");
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    auto tokenizer = Tokenizer::FromGguf(model_->file());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
  }
  // What the HTTP front end makes of the same messages.
  std::vector<int32_t> http_tokens(const std::vector<ChatMessage>& messages, bool continuing, bool add_bos) const {
    const ChatFormat format = chat_format_from_gguf(model_->file(), *tokenizer_);
    ChatRenderOptions options = format.options;
    options.continuation = continuing;
    return tokenize_chat(*tokenizer_, render_chat(format.family, messages, options), add_bos);
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

v1::ChatTurn turn(const std::vector<std::pair<std::string, std::string>>& messages) {
  v1::ChatTurn out;
  for (const auto& [role, content] : messages) {
    v1::ChatTurnMessage* m = out.add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  return out;
}

TEST_F(EdgeChatTurnTest, SameTokensAsTheHttpChatCompletions) {
  const v1::ChatTurn first = turn({{"system", "Answer in verse."}, {"user", "Who made the earth?"}});
  auto tokens = chat_turn_tokens(model_->file(), *tokenizer_, first, /*continuing=*/false, /*add_bos=*/true);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->tokens,
            http_tokens({{"system", "Answer in verse."}, {"user", "Who made the earth?"}}, false, true));
  // The template is applied: more tokens than the bare text.
  EXPECT_GT(tokens->tokens.size(), tokenizer_->encode("Who made the earth?").size() + 3);
  // The bundled model has no template: the default layout, whose turn marker is a stop.
  EXPECT_THAT(tokens->stops, ::testing::ElementsAre("<|user|>"));

  const v1::ChatTurn next = turn({{"user", "And then?"}});
  auto later = chat_turn_tokens(model_->file(), *tokenizer_, next, /*continuing=*/true, /*add_bos=*/false);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(later->tokens, http_tokens({{"user", "And then?"}}, true, false));
  auto fresh = chat_turn_tokens(model_->file(), *tokenizer_, next, /*continuing=*/false, /*add_bos=*/false);
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(later->tokens, fresh->tokens);  // a continuation first closes the last answer
}

TEST_F(EdgeChatTurnTest, RefusesEmptyTurnsAndUnknownRoles) {
  EXPECT_THAT(std::string(chat_turn_tokens(model_->file(), *tokenizer_, v1::ChatTurn(), false, true).status().message()),
              ::testing::HasSubstr("chat has no messages"));
  const auto bad = chat_turn_tokens(model_->file(), *tokenizer_, turn({{"user", "hi"}, {"tool", "x"}}), false, true);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("chat.messages[1].role = 'tool'"));
}

}  // namespace
}  // namespace baton
