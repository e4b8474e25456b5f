// Session files record the turns a session holds and what truncation dropped
// (format 2), and files of format 1 (no turn records) still load, as one
// turn; turn records out of order are damage. A truncating turn that fails
// puts the conversation it set aside back whole (SessionLease).
#include "edge_decode/store/session_file.h"
#include "edge_decode/store/session_lease.h"
#include "edge_decode/store/session_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "common/kv_cache/quantized_kv_cache.h"
#include "common/kv_stream/kv_stream.h"
#include "tests/support/test_models.h"
#include "tests/support/tiny_model.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
namespace pbio = google::protobuf::io;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class SessionTurnsFileTest : public testing::TinyModelTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(TinyModelTest::SetUp());
    dir_ = testing::make_temp_dir("session-turns");
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // A session of 30 tokens (KV of the first 29) in three turns after a pack
  // of 6, having dropped two turns earlier.
  std::unique_ptr<Session> make_session() {
    auto s = std::make_unique<Session>();
    s->id = "turns";
    s->tokens = testing::seeded_prompt(testing::shared_tiny_model(), 30, 5);
    s->codec = *parse_kv_codec_config("f16");
    auto kv = QuantizedKvCache::Create(geometry_, 30, s->codec);
    EXPECT_TRUE(kv.ok()) << kv.status();
    s->kv = std::move(*kv);
    const std::vector<int32_t> held(s->tokens.begin(), s->tokens.end() - 1);
    EXPECT_TRUE(engine_->prefill(held, *s->kv, nullptr).ok());
    s->pack_id = "system";
    s->pack_tokens = 6;
    s->turns = {{3, 6}, {4, 14}, {5, 22}};
    s->turn_count = 5;
    s->dropped_turns = 2;
    s->dropped_tokens = 17;
    s->truncations = 1;
    s->sampler.rng = {1, 2, 3, 4};
    return s;
  }

  std::string path() const { return dir_ + "/turns.session"; }

  // Rewrites the file's header with `edit` applied (and a matching checksum).
  void rewrite_header(const std::function<void(v1::SessionFileHeader&)>& edit) {
    std::ifstream in(path(), std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    pbio::ArrayInputStream array(bytes.data(), static_cast<int>(bytes.size()));
    pbio::CodedInputStream coded(&array);
    std::string magic;
    uint32_t size = 0;
    std::string header_bytes;
    uint64_t checksum = 0;
    ASSERT_TRUE(coded.ReadString(&magic, 8) && coded.ReadVarint32(&size) &&
                coded.ReadString(&header_bytes, static_cast<int>(size)) && coded.ReadLittleEndian64(&checksum));
    const std::string rest = bytes.substr(static_cast<size_t>(coded.CurrentPosition()));
    v1::SessionFileHeader header;
    ASSERT_TRUE(header.ParseFromString(header_bytes));
    edit(header);
    const std::string edited = header.SerializeAsString();
    std::string out;
    {
      pbio::StringOutputStream output(&out);
      pbio::CodedOutputStream writer(&output);
      writer.WriteRaw(magic.data(), static_cast<int>(magic.size()));
      writer.WriteVarint32(static_cast<uint32_t>(edited.size()));
      writer.WriteRaw(edited.data(), static_cast<int>(edited.size()));
      writer.WriteLittleEndian64(kv_payload_checksum(edited));
    }
    out += rest;
    std::ofstream file(path(), std::ios::binary | std::ios::trunc);
    file.write(out.data(), static_cast<std::streamsize>(out.size()));
  }

  std::string dir_;
};

TEST_F(SessionTurnsFileTest, TurnRecordsAndTruncationCountersRoundTrip) {
  auto original = make_session();
  ASSERT_TRUE(save_session_file(path(), *original, fingerprint_).ok());
  auto header = read_session_file_header(path(), fingerprint_);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->header.format_version(), 2u);
  auto loaded = load_session_file(path(), fingerprint_, geometry_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Session& s = **loaded;
  EXPECT_EQ(s.tokens, original->tokens);
  EXPECT_THAT(s.turns, ElementsAre(SessionTurn{3, 6}, SessionTurn{4, 14}, SessionTurn{5, 22}));
  EXPECT_EQ(s.turn_count, 5u);
  EXPECT_EQ(s.pack_tokens, 6u);
  EXPECT_EQ(s.dropped_turns, 2u);
  EXPECT_EQ(s.dropped_tokens, 17u);
  EXPECT_EQ(s.truncations, 1u);
  EXPECT_EQ(s.kv->size(), 29);
}

TEST_F(SessionTurnsFileTest, AFormat1FileLoadsAsOneTurn) {
  auto original = make_session();
  ASSERT_TRUE(save_session_file(path(), *original, fingerprint_).ok());
  rewrite_header([](v1::SessionFileHeader& h) {
    h.set_format_version(1);
    h.clear_turns();
    h.clear_turn_count();
    h.clear_dropped_turns();
    h.clear_dropped_tokens();
    h.clear_truncations();
    h.clear_pack_tokens();
  });
  auto loaded = load_session_file(path(), fingerprint_, geometry_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Session& s = **loaded;
  EXPECT_EQ(s.tokens, original->tokens);
  EXPECT_THAT(s.turns, ElementsAre(SessionTurn{1, 0}));
  EXPECT_EQ(s.turn_count, 1u);
  EXPECT_EQ(s.pack_tokens, 0u);  // unknown in format 1: the agent asks its pack store
  EXPECT_EQ(s.kv->size(), 29);
}

TEST_F(SessionTurnsFileTest, TurnRecordsOutOfOrderOrPastTheTokensAreDamage) {
  auto original = make_session();
  ASSERT_TRUE(save_session_file(path(), *original, fingerprint_).ok());
  rewrite_header([](v1::SessionFileHeader& h) { h.mutable_turns(1)->set_first_token(4); });
  auto loaded = load_session_file(path(), fingerprint_, geometry_);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("turn record 1"));

  ASSERT_TRUE(save_session_file(path(), *original, fingerprint_).ok());
  rewrite_header([](v1::SessionFileHeader& h) { h.mutable_turns(2)->set_first_token(30); });
  EXPECT_EQ(load_session_file(path(), fingerprint_, geometry_).status().code(), absl::StatusCode::kDataLoss);

  ASSERT_TRUE(save_session_file(path(), *original, fingerprint_).ok());
  rewrite_header([](v1::SessionFileHeader& h) { h.set_format_version(3); });
  const auto newer = load_session_file(path(), fingerprint_, geometry_);
  EXPECT_EQ(newer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(newer.status().message()), HasSubstr("reads versions 1 to 2"));
}

TEST_F(SessionTurnsFileTest, AFailedTruncatingTurnPutsTheOldConversationBack) {
  SessionStore store(SessionStoreOptions{}, fingerprint_, geometry_);
  ASSERT_TRUE(store.open().ok());
  ASSERT_TRUE(store.reserve("turns").ok());
  auto original = make_session();
  const std::vector<int32_t> tokens = original->tokens;
  ASSERT_TRUE(store.commit(std::move(original)).ok());
  {
    absl::StatusOr<std::unique_ptr<Session>> taken = store.checkout("turns");
    ASSERT_TRUE(taken.ok()) << taken.status();
    SessionLease lease(&store, std::move(*taken), /*is_new=*/false, /*one_shot=*/false);
    const QuantizedKvCache* old = lease.set_aside_conversation();
    ASSERT_NE(old, nullptr);
    EXPECT_EQ(old->size(), 29);
    EXPECT_TRUE(lease->tokens.empty());
    EXPECT_EQ(lease->kv, nullptr);
    // The turn's shortened conversation, then a failure (no commit).
    auto kv = QuantizedKvCache::Create(geometry_, 8, lease->codec);
    ASSERT_TRUE(kv.ok());
    lease->kv = std::move(*kv);
    lease->tokens = {1, 2, 3};
    lease->turns = {{6, 0}};
    lease->turn_count = 6;
    lease->dropped_turns = 9;
  }
  absl::StatusOr<std::unique_ptr<Session>> back = store.checkout("turns");
  ASSERT_TRUE(back.ok()) << back.status();
  const Session& s = **back;
  EXPECT_EQ(s.tokens, tokens);
  ASSERT_NE(s.kv, nullptr);
  EXPECT_EQ(s.kv->size(), 29);
  EXPECT_THAT(s.turns, ElementsAre(SessionTurn{3, 6}, SessionTurn{4, 14}, SessionTurn{5, 22}));
  EXPECT_EQ(s.turn_count, 5u);
  EXPECT_EQ(s.dropped_turns, 2u);
  store.release(std::move(*back));
}

}  // namespace
}  // namespace baton
