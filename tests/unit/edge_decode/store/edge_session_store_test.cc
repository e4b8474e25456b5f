// The edge agent's session store on the tiny synthetic model: session files
// round-trip bit-identical (KV planes, attention outputs, the next decode
// step, sampler state) for F16, INT8, INT4 and mixed stores; damaged files
// (truncated, any flipped byte) and files of another model are refused with
// a clear error and never crash; a failed save leaves the previous file and
// no temp file; the LRU caps evict to disk and checkout reloads; files are
// 0600 in a 0700 directory. Also QuantizedKvCache::reserve, which sessions
// grow their KV with between turns.
#include "edge_decode/store/session_store.h"
#include "edge_decode/store/session_file.h"

#include <gmock/gmock.h>
#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/engine/engine.h"
#include "common/engine/sampler.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/util/sha256.h"
#include "tests/support/test_models.h"
#include "tests/support/tiny_model.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using ::testing::AnyOf;
using ::testing::HasSubstr;

KvCodecConfig parse(const std::string& name) {
  auto c = parse_kv_codec_config(name);
  EXPECT_TRUE(c.ok()) << name << ": " << c.status();
  return *c;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  // A fresh file, not a truncated one: ext4 flushes truncated files on close
  // (auto_da_alloc), which makes the damage sweeps below crawl.
  std::error_code ignored;
  fs::remove(path, ignored);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Names of the files in `dir`.
std::vector<std::string> dir_names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Every stored byte of two caches over [0, size()) and attention outputs at
// the last position of every layer are equal.
void expect_kv_identical(const QuantizedKvCache& a, const QuantizedKvCache& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.config(), b.config());
  const KvGeometry& g = a.geometry();
  for (int layer = 0; layer < g.n_layer; ++layer) {
    for (bool is_key : {true, false}) {
      auto x = a.export_block(layer, is_key, 0, a.size());
      auto y = b.export_block(layer, is_key, 0, b.size());
      ASSERT_TRUE(x.ok() && y.ok());
      EXPECT_EQ(x->codes, y->codes) << "layer " << layer << (is_key ? " K" : " V");
      EXPECT_EQ(x->scales, y->scales) << "layer " << layer << (is_key ? " K" : " V");
      EXPECT_EQ(x->mins, y->mins) << "layer " << layer << (is_key ? " K" : " V");
    }
    if (a.size() == 0) continue;
    Rng rng(static_cast<uint64_t>(layer) + 11);
    std::vector<float> q(static_cast<size_t>(g.q_dim()));  // f32 [1, q_dim]
    for (float& v : q) v = static_cast<float>(rng.uniform() * 2 - 1);
    std::vector<float> out_a(q.size()), out_b(q.size());
    a.attend(layer, a.size() - 1, 1, q.data(), out_a.data(), nullptr);
    b.attend(layer, b.size() - 1, 1, q.data(), out_b.data(), nullptr);
    EXPECT_EQ(0, std::memcmp(out_a.data(), out_b.data(), out_a.size() * sizeof(float))) << "attend, layer " << layer;
  }
}

class SessionStoreTest : public testing::TinyModelTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(TinyModelTest::SetUp());
    dir_ = testing::make_temp_dir("sessions");
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // What a committed session holds in memory: the KV of its tokens (the
  // store gives a turn's spare capacity back at commit).
  static uint64_t held_bytes(const Session& s) {
    return static_cast<uint64_t>(s.kv->size() * s.kv->bytes_per_token());
  }

  // A session after a turn: `n_tokens` tokens, the KV of all but the last
  // (prefilled by the engine), capacity with room to spare, a sampler that
  // has sampled a few tokens.
  std::unique_ptr<Session> make_session(const std::string& id, const std::string& codec, int n_tokens,
                                        uint64_t seed = 1) {
    auto s = std::make_unique<Session>();
    s->id = id;
    Rng rng(seed);
    for (int i = 0; i < n_tokens; ++i) s->tokens.push_back(static_cast<int32_t>(rng.next() % 512));
    s->codec = parse(codec);
    auto kv = QuantizedKvCache::Create(geometry_, n_tokens + 7, s->codec);
    EXPECT_TRUE(kv.ok()) << kv.status();
    s->kv = std::move(*kv);
    if (n_tokens > 1) {
      const std::vector<int32_t> prefix(s->tokens.begin(), s->tokens.end() - 1);
      EXPECT_TRUE(engine_->prefill(prefix, *s->kv, nullptr).ok());
    }
    s->pack_id = "pack-" + id;
    SamplingParams params;
    params.temperature = 0.8f;
    params.seed = seed * 7 + 1;
    Sampler sampler(params);
    std::vector<float> logits(512);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(rng.uniform());
    for (int i = 0; i < 5; ++i) sampler.accept(sampler.sample(logits));
    s->sampler = sampler.state();
    s->created_unix_ms = 1700000000000 + static_cast<int64_t>(seed);
    s->last_used_unix_ms = 1700000000500 + static_cast<int64_t>(seed);
    return s;
  }

  std::string path(const std::string& id) const { return dir_ + "/" + id + ".session"; }

  // The served model with one field changed (another model's weights).
  ModelFingerprint other_model() const {
    ModelFingerprint other = fingerprint_;
    for (auto& [name, value] : other.fields) {
      if (name == "source_weights_digest") value = std::string(value.size(), 'f');
    }
    other.digest = to_hex(sha256(other.canonical()));
    return other;
  }

  // Logits of the next decode step: the session's last token on its KV.
  std::vector<float> next_logits(const Session& s) {
    auto kv = QuantizedKvCache::Create(geometry_, s.kv->size() + 1, s.kv->config());
    EXPECT_TRUE(kv.ok());
    // A copy through export/ingest, so the session itself stays as it is.
    for (int layer = 0; layer < geometry_.n_layer; ++layer) {
      for (bool is_key : {true, false}) {
        auto block = s.kv->export_block(layer, is_key, 0, s.kv->size());
        EXPECT_TRUE(block.ok());
        EXPECT_TRUE((*kv)->ingest_block(layer, is_key, 0, *block).ok());
      }
    }
    (*kv)->set_size(s.kv->size());
    std::vector<float> logits;
    EXPECT_TRUE(engine_->decode_step(s.tokens.back(), **kv, &logits).ok());
    return logits;
  }

  SessionStoreOptions options(uint64_t max_memory_bytes = 0, int max_sessions = 0) const {
    SessionStoreOptions o;
    o.dir = dir_;
    o.max_memory_bytes = max_memory_bytes;
    o.max_sessions = max_sessions;
    return o;
  }

  std::string dir_;
};

// ---------------------------------------------------------------------------
// Session files

class SessionFileRoundTrip : public SessionStoreTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(SessionFileRoundTrip, RestoresTokensSamplerAndBitIdenticalKv) {
  auto original = make_session("chat-1", GetParam(), 37);
  ASSERT_TRUE(save_session_file(path("chat-1"), *original, fingerprint_).ok());
  auto loaded = load_session_file(path("chat-1"), fingerprint_, geometry_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Session& s = **loaded;
  EXPECT_EQ(s.id, "chat-1");
  EXPECT_EQ(s.tokens, original->tokens);
  EXPECT_EQ(s.codec, original->codec);
  EXPECT_EQ(s.pack_id, "pack-chat-1");
  EXPECT_EQ(s.sampler.rng, original->sampler.rng);
  EXPECT_EQ(s.sampler.recent, original->sampler.recent);
  EXPECT_EQ(s.created_unix_ms, original->created_unix_ms);
  EXPECT_EQ(s.last_used_unix_ms, original->last_used_unix_ms);
  ASSERT_NE(s.kv, nullptr);
  EXPECT_EQ(s.kv->size(), 36);
  expect_kv_identical(*original->kv, *s.kv);
  // The conversation goes on exactly as it would have.
  EXPECT_EQ(next_logits(s), next_logits(*original));
  SamplingParams params;
  params.temperature = 0.8f;
  Sampler a(params), b(params);
  a.restore(original->sampler);
  b.restore(s.sampler);
  const std::vector<float> logits = next_logits(s);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(a.sample(logits), b.sample(logits));
}

INSTANTIATE_TEST_SUITE_P(StoreCodecs, SessionFileRoundTrip,
                         ::testing::Values("f16", "int8-g16", "int4-g16", "int4-k8-g16", "int8-g8-had"),
                         [](const auto& test_param) {
                           std::string name = test_param.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST_F(SessionStoreTest, SessionFileWithEmptyKvRoundTrips) {
  auto original = make_session("fresh", "int8-g16", 1);  // one token, no KV yet
  ASSERT_EQ(original->kv->size(), 0);
  ASSERT_TRUE(save_session_file(path("fresh"), *original, fingerprint_).ok());
  auto loaded = load_session_file(path("fresh"), fingerprint_, geometry_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->tokens, original->tokens);
  ASSERT_NE((*loaded)->kv, nullptr);
  EXPECT_EQ((*loaded)->kv->size(), 0);
  EXPECT_EQ((*loaded)->kv->config(), original->kv->config());
}

TEST_F(SessionStoreTest, SessionFileRejectsBadSessions) {
  auto s = make_session("ok", "f16", 4);
  s->id = "../escape";
  EXPECT_EQ(save_session_file(dir_ + "/x.session", *s, fingerprint_).code(), absl::StatusCode::kInvalidArgument);
  s->id = "ok";
  s->tokens.resize(2);  // fewer tokens than the KV holds
  EXPECT_EQ(save_session_file(path("ok"), *s, fingerprint_).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dir_names(dir_), std::vector<std::string>{});
}

TEST_F(SessionStoreTest, SessionFileOfAnotherModelIsRefusedNamingTheFieldAndKept) {
  auto s = make_session("other", "int8-g16", 9);
  ASSERT_TRUE(save_session_file(path("other"), *s, other_model()).ok());
  auto loaded = load_session_file(path("other"), fingerprint_, geometry_);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(loaded.status().message(), HasSubstr("source_weights_digest"));

  ASSERT_TRUE(save_session_file(path("mine"), *make_session("mine", "f16", 5), fingerprint_).ok());
  SessionStore store(options(), fingerprint_, geometry_);
  std::vector<std::string> refused;
  ASSERT_TRUE(store.open(&refused).ok());
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_THAT(refused[0], HasSubstr("other.session"));
  EXPECT_THAT(refused[0], HasSubstr("source_weights_digest"));
  EXPECT_FALSE(store.contains("other"));
  EXPECT_TRUE(store.contains("mine"));
  EXPECT_EQ(store.checkout("other").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(fs::exists(path("other")));  // left for the user
}

TEST_F(SessionStoreTest, TruncatedSessionFileIsAClearError) {
  ASSERT_TRUE(save_session_file(path("t"), *make_session("t", "int4-g16", 21), fingerprint_).ok());
  const std::string bytes = read_bytes(path("t"));
  ASSERT_GT(bytes.size(), 100u);
  const std::string cut = dir_ + "/cut.session";
  google::protobuf::LogSilencer quiet;  // damaged strings make protobuf log UTF-8 complaints
  for (size_t n = 0; n < bytes.size(); ++n) {
    write_bytes(cut, bytes.substr(0, n));
    auto loaded = load_session_file(cut, fingerprint_, geometry_);
    ASSERT_FALSE(loaded.ok()) << "truncated to " << n << " of " << bytes.size() << " bytes";
    EXPECT_THAT(loaded.status().code(), AnyOf(absl::StatusCode::kDataLoss, absl::StatusCode::kInvalidArgument))
        << n << ": " << loaded.status();
  }
  // Bytes after the end are damage too.
  write_bytes(cut, bytes + "x");
  EXPECT_THAT(load_session_file(cut, fingerprint_, geometry_).status().code(),
              AnyOf(absl::StatusCode::kDataLoss, absl::StatusCode::kInvalidArgument));
}

TEST_F(SessionStoreTest, FlippedByteAnywhereIsAClearError) {
  ASSERT_TRUE(save_session_file(path("f"), *make_session("f", "int8-g16", 13), fingerprint_).ok());
  const std::string bytes = read_bytes(path("f"));
  const std::string damaged_path = dir_ + "/damaged.session";
  google::protobuf::LogSilencer quiet;  // damaged strings make protobuf log UTF-8 complaints
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x10);
    write_bytes(damaged_path, damaged);
    auto loaded = load_session_file(damaged_path, fingerprint_, geometry_);
    ASSERT_FALSE(loaded.ok()) << "byte " << i << " of " << bytes.size() << " flipped and the file still loads";
    EXPECT_THAT(loaded.status().code(), AnyOf(absl::StatusCode::kDataLoss, absl::StatusCode::kInvalidArgument))
        << "byte " << i << ": " << loaded.status();
  }
}

TEST_F(SessionStoreTest, FailedSaveLeavesThePreviousFileIntactAndNoTempFile) {
  ASSERT_TRUE(save_session_file(path("a"), *make_session("a", "f16", 5), fingerprint_).ok());
  const std::string before = read_bytes(path("a"));
  // The next turn's file is larger than the process may write (RLIMIT_FSIZE:
  // write() fails with EFBIG, even for root).
  auto bigger = make_session("a", "f16", 40);
  struct rlimit old_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = before.size() + 64;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const absl::Status st = save_session_file(path("a"), *bigger, fingerprint_);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_EQ(read_bytes(path("a")), before);
  EXPECT_EQ(dir_names(dir_), std::vector<std::string>{"a.session"});
  auto loaded = load_session_file(path("a"), fingerprint_, geometry_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->tokens.size(), 5u);
}

// ---------------------------------------------------------------------------
// SessionStore

TEST_F(SessionStoreTest, CommitSavesFilesWithMode0600InADirWithMode0700) {
  const std::string sub = dir_ + "/new/sessions";
  SessionStoreOptions o = options();
  o.dir = sub;
  SessionStore store(o, fingerprint_, geometry_);
  ASSERT_TRUE(store.open().ok());
  struct stat st{};
  ASSERT_EQ(stat(sub.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_TRUE(store.reserve("m").ok());
  ASSERT_TRUE(store.commit(make_session("m", "int8-g16", 6)).ok());
  ASSERT_EQ(stat((sub + "/m.session").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(dir_names(sub), std::vector<std::string>{"m.session"});
}

TEST_F(SessionStoreTest, CheckoutIsExclusiveAndReserveGuardsFirstTurns) {
  SessionStore store(options(), fingerprint_, geometry_);
  ASSERT_TRUE(store.open().ok());
  EXPECT_EQ(store.checkout("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.reserve("bad/id").code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store.reserve("s").ok());
  EXPECT_EQ(store.reserve("s").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.checkout("s").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(store.contains("s"));
  store.abandon("s");
  ASSERT_TRUE(store.reserve("s").ok());
  ASSERT_TRUE(store.commit(make_session("s", "f16", 8)).ok());
  EXPECT_TRUE(store.contains("s"));
  EXPECT_EQ(store.reserve("s").code(), absl::StatusCode::kAlreadyExists);

  auto first = store.checkout("s");
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = store.checkout("s");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.remove("s").status().code(), absl::StatusCode::kFailedPrecondition);
  auto listed = store.list();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(listed[0].busy);
  store.release(std::move(*first));
  auto again = store.checkout("s");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->tokens.size(), 8u);
  // A commit of a session nobody checked out is refused.
  EXPECT_EQ(store.commit(make_session("stranger", "f16", 3)).code(), absl::StatusCode::kFailedPrecondition);
  store.release(std::move(*again));
}

TEST_F(SessionStoreTest, LruCapEvictsToDiskAndCheckoutReloadsIdentical) {
  auto reference_a = make_session("a", "int4-g16", 30, 1);
  auto reference_b = make_session("b", "int4-g16", 30, 2);
  const uint64_t one = held_bytes(*reference_a);
  // Room for two sessions.
  SessionStore store(options(2 * one + one / 2), fingerprint_, geometry_);
  ASSERT_TRUE(store.open().ok());
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_TRUE(store.reserve(id).ok());
    ASSERT_TRUE(store.commit(make_session(id, "int4-g16", 30, id[0] - 'a' + 1)).ok());
  }
  EXPECT_EQ(store.size(), 3u);
  EXPECT_LE(store.memory_bytes(), 2 * one + one / 2);
  auto listed = store.list();  // most recent first: c, b, a
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[0].id, "c");
  EXPECT_EQ(listed[2].id, "a");
  EXPECT_EQ(listed[2].kv_bytes, 0u);  // evicted
  EXPECT_GT(listed[0].kv_bytes, 0u);
  for (const auto& s : listed) {
    EXPECT_TRUE(s.persisted) << s.id;
    EXPECT_EQ(s.token_count, 29u);
  }

  // A busy session is never evicted: hold b, then bring a back; c goes.
  auto b = store.checkout("b");
  ASSERT_TRUE(b.ok());
  auto a = store.checkout("a");
  ASSERT_TRUE(a.ok()) << a.status();
  expect_kv_identical(*reference_a->kv, *(*a)->kv);
  EXPECT_EQ((*a)->sampler.rng, reference_a->sampler.rng);
  EXPECT_EQ(next_logits(**a), next_logits(*reference_a));
  for (const auto& s : store.list()) {
    if (s.id == "c") {
      EXPECT_EQ(s.kv_bytes, 0u);
    } else {
      EXPECT_TRUE(s.busy) << s.id;
    }
  }
  ASSERT_TRUE(store.commit(std::move(*a)).ok());
  store.release(std::move(*b));
  EXPECT_LE(store.memory_bytes(), 2 * one + one / 2);
  auto c = store.checkout("c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->tokens.size(), 30u);
  store.release(std::move(*c));

  // max_sessions caps the count the same way.
  SessionStore counted(options(0, 1), fingerprint_, geometry_);
  ASSERT_TRUE(counted.open().ok());
  EXPECT_EQ(counted.size(), 3u);
  auto x = counted.checkout("a");
  ASSERT_TRUE(x.ok());
  ASSERT_TRUE(counted.commit(std::move(*x)).ok());
  auto y = counted.checkout("b");
  ASSERT_TRUE(y.ok());
  ASSERT_TRUE(counted.commit(std::move(*y)).ok());
  int resident = 0;
  uint64_t listed_bytes = 0;
  for (const auto& s : counted.list()) {
    resident += s.kv_bytes > 0;
    listed_bytes += s.kv_bytes;
  }
  EXPECT_EQ(resident, 1);
  EXPECT_GT(counted.memory_bytes(), 0u);
  EXPECT_EQ(counted.memory_bytes(), listed_bytes);
}

TEST_F(SessionStoreTest, ReopenIndexesHeadersAndLoadsOnCheckout) {
  auto reference = make_session("keep", "int8-g16", 25, 5);
  {
    SessionStore store(options(), fingerprint_, geometry_);
    ASSERT_TRUE(store.open().ok());
    ASSERT_TRUE(store.reserve("keep").ok());
    ASSERT_TRUE(store.commit(make_session("keep", "int8-g16", 25, 5)).ok());
    ASSERT_TRUE(store.reserve("older").ok());
    ASSERT_TRUE(store.commit(make_session("older", "f16", 4, 6)).ok());
    // Millisecond timestamps: make "keep"'s next use strictly later.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto k = store.checkout("keep");  // now the most recent
    ASSERT_TRUE(k.ok());
    ASSERT_TRUE(store.commit(std::move(*k)).ok());
  }
  // A stale temp file of an interrupted save is cleaned up.
  write_bytes(dir_ + "/keep.session.tmp.99999.0", "partial");
  SessionStore store(options(), fingerprint_, geometry_);
  std::vector<std::string> refused;
  ASSERT_TRUE(store.open(&refused).ok());
  EXPECT_TRUE(refused.empty());
  EXPECT_EQ(dir_names(dir_), (std::vector<std::string>{"keep.session", "older.session"}));
  EXPECT_EQ(store.memory_bytes(), 0u);
  auto listed = store.list();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].id, "keep");
  EXPECT_EQ(listed[0].token_count, 24u);
  EXPECT_EQ(listed[0].pack_id, "pack-keep");
  EXPECT_EQ(listed[0].codec, parse("int8-g16"));
  EXPECT_EQ(listed[0].prefix_digest,
            prefix_digest(std::span<const int32_t>(reference->tokens.data(), 24)));
  EXPECT_TRUE(listed[0].persisted);
  EXPECT_GE(listed[0].last_used_unix_ms, listed[1].last_used_unix_ms);
  auto k = store.checkout("keep");
  ASSERT_TRUE(k.ok()) << k.status();
  expect_kv_identical(*reference->kv, *(*k)->kv);
  EXPECT_EQ((*k)->tokens, reference->tokens);
  EXPECT_GT(store.memory_bytes(), 0u);
  store.release(std::move(*k));
}

// Only "<id>.session.tmp.<pid>.<n>" is an interrupted save: a session whose
// id merely contains ".session.tmp." is a session, kept across a restart.
TEST_F(SessionStoreTest, ReopenRemovesOnlyTempFilesNotSessionsNamedLikeThem) {
  EXPECT_TRUE(is_session_temp_file_name("a.session.tmp.4242.7"));
  EXPECT_TRUE(is_session_temp_file_name("a.session.tmp.1.session.tmp.4242.7"));
  for (const char* name : {"a.session", "a.session.tmp.1.session", "a.session.tmp.1", "a.session.tmp.x.7",
                           "a.session.tmp.1.7x", "a.session.tmp..7", ".session.tmp.1.2"}) {
    EXPECT_FALSE(is_session_temp_file_name(name)) << name;
  }
  const std::vector<std::string> ids = {"notes.session.tmp.1", "x.session.tmp.12.3"};
  {
    SessionStore store(options(), fingerprint_, geometry_);
    ASSERT_TRUE(store.open().ok());
    for (const std::string& id : ids) {
      ASSERT_TRUE(store.reserve(id).ok());
      ASSERT_TRUE(store.commit(make_session(id, "f16", 6)).ok());
    }
  }
  write_bytes(dir_ + "/notes.session.tmp.1.session.tmp.4242.7", "partial");
  SessionStore store(options(), fingerprint_, geometry_);
  std::vector<std::string> refused;
  ASSERT_TRUE(store.open(&refused).ok());
  EXPECT_TRUE(refused.empty());
  EXPECT_EQ(dir_names(dir_),
            (std::vector<std::string>{"notes.session.tmp.1.session", "x.session.tmp.12.3.session"}));
  for (const std::string& id : ids) {
    EXPECT_TRUE(store.contains(id)) << id;
    auto session = store.checkout(id);
    ASSERT_TRUE(session.ok()) << session.status();
    EXPECT_EQ((*session)->tokens.size(), 6u);
    store.release(std::move(*session));
  }
}

TEST_F(SessionStoreTest, CorruptFileIsDataLossOnCheckoutAndStaysListed) {
  {
    SessionStore store(options(), fingerprint_, geometry_);
    ASSERT_TRUE(store.open().ok());
    ASSERT_TRUE(store.reserve("d").ok());
    ASSERT_TRUE(store.commit(make_session("d", "int8-g16", 20)).ok());
  }
  SessionStore store(options(), fingerprint_, geometry_);
  ASSERT_TRUE(store.open().ok());
  std::string bytes = read_bytes(path("d"));
  bytes[bytes.size() - 40] ^= 0x01;  // inside the KV section
  write_bytes(path("d"), bytes);
  auto d = store.checkout("d");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss) << d.status();
  // Not left busy.
  EXPECT_EQ(store.checkout("d").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(store.contains("d"));
}

// `baton sessions ls` showed the KV of the capacity a turn reserved (an
// 11-token session: the bytes of ~1015 tokens): the store now gives the spare
// room back at commit, and lists what the tokens hold.
TEST_F(SessionStoreTest, CommitGivesBackTheRoomATurnReserved) {
  SessionStore store(options(), fingerprint_, geometry_);
  ASSERT_TRUE(store.open().ok());
  ASSERT_TRUE(store.reserve("room").ok());
  auto session = make_session("room", "int4-g16", 11);  // KV of 10 tokens, capacity 18
  ASSERT_GT(session->kv->capacity(), session->kv->size());
  const uint64_t per_token = static_cast<uint64_t>(session->kv->bytes_per_token());
  ASSERT_TRUE(store.commit(std::move(session)).ok());
  const auto listed = store.list();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].token_count, 10u);
  EXPECT_EQ(listed[0].kv_bytes, 10 * per_token);
  EXPECT_EQ(store.memory_bytes(), 10 * per_token);
  // The next turn gets the same KV back and can grow it again.
  auto again = store.checkout("room");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->kv->capacity(), 10);
  ASSERT_TRUE((*again)->kv->reserve(40).ok());
  store.release(std::move(*again));
}

TEST_F(SessionStoreTest, RemoveFreesMemoryAndFile) {
  SessionStore store(options(), fingerprint_, geometry_);
  ASSERT_TRUE(store.open().ok());
  ASSERT_TRUE(store.reserve("r").ok());
  auto session = make_session("r", "f16", 10);
  const uint64_t kv_bytes = held_bytes(*session);
  ASSERT_TRUE(store.commit(std::move(session)).ok());
  const uint64_t file_bytes = fs::file_size(path("r"));
  EXPECT_EQ(store.memory_bytes(), kv_bytes);
  auto freed = store.remove("r");
  ASSERT_TRUE(freed.ok()) << freed.status();
  EXPECT_EQ(*freed, kv_bytes + file_bytes);
  EXPECT_EQ(store.memory_bytes(), 0u);
  EXPECT_FALSE(store.contains("r"));
  EXPECT_FALSE(fs::exists(path("r")));
  EXPECT_EQ(store.remove("r").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SessionStoreTest, MemoryOnlyStoreKeepsNothingOnDiskAndDropsOverTheCap) {
  const uint64_t one = held_bytes(*make_session("x", "int8-g16", 12));
  SessionStoreOptions o;
  o.max_memory_bytes = one + one / 2;
  SessionStore store(o, fingerprint_, geometry_);
  ASSERT_TRUE(store.open().ok());
  ASSERT_TRUE(store.reserve("x").ok());
  ASSERT_TRUE(store.commit(make_session("x", "int8-g16", 12)).ok());
  ASSERT_TRUE(store.reserve("y").ok());
  ASSERT_TRUE(store.commit(make_session("y", "int8-g16", 12)).ok());
  EXPECT_FALSE(store.contains("x"));
  EXPECT_TRUE(store.contains("y"));
  auto listed = store.list();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_FALSE(listed[0].persisted);
  EXPECT_EQ(dir_names(dir_), std::vector<std::string>{});
}

TEST_F(SessionStoreTest, FailedCommitKeepsTheSessionAndThePreviousFile) {
  SessionStore store(options(), fingerprint_, geometry_);
  ASSERT_TRUE(store.open().ok());
  ASSERT_TRUE(store.reserve("p").ok());
  ASSERT_TRUE(store.commit(make_session("p", "f16", 5)).ok());
  const std::string before = read_bytes(path("p"));
  auto s = store.checkout("p");
  ASSERT_TRUE(s.ok());
  auto bigger = make_session("p", "f16", 40);
  struct rlimit old_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = before.size() + 64;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const absl::Status st = store.commit(std::move(bigger));
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(read_bytes(path("p")), before);
  EXPECT_EQ(dir_names(dir_), std::vector<std::string>{"p.session"});
  auto listed = store.list();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_FALSE(listed[0].persisted);
  EXPECT_EQ(listed[0].token_count, 39u);  // the new turn, in memory
  auto again = store.checkout("p");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->tokens.size(), 40u);
  // The next successful commit persists it.
  ASSERT_TRUE(store.commit(std::move(*again)).ok());
  EXPECT_TRUE(store.list()[0].persisted);
  store.release(std::move(*s));  // the stale copy: not checked out any more, dropped
}

TEST_F(SessionStoreTest, ConcurrentTurnsOnSharedIdsKeepOneTurnPerSession) {
  // Four threads run turns on three ids under a cap that keeps evicting:
  // every checkout either gets the session or FAILED_PRECONDITION, every
  // committed turn appends one token, and nothing is lost.
  std::vector<std::unique_ptr<Session>> seeds;
  for (const char* id : {"s0", "s1", "s2"}) seeds.push_back(make_session(id, "int8-g16", 8));
  const uint64_t one = seeds[0]->kv_bytes();
  SessionStore store(options(one + one / 2), fingerprint_, geometry_);
  ASSERT_TRUE(store.open().ok());
  for (auto& s : seeds) {
    ASSERT_TRUE(store.reserve(s->id).ok());
    ASSERT_TRUE(store.commit(std::move(s)).ok());
  }
  std::atomic<int> committed{0}, refused_busy{0}, other_errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        const std::string id = "s" + std::to_string((t + i) % 3);
        auto s = store.checkout(id);
        if (!s.ok()) {
          (s.status().code() == absl::StatusCode::kFailedPrecondition ? refused_busy : other_errors)++;
          continue;
        }
        (*s)->tokens.push_back(static_cast<int32_t>(i));
        if (store.commit(std::move(*s)).ok()) {
          ++committed;
        } else {
          ++other_errors;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(other_errors.load(), 0);
  EXPECT_EQ(committed.load() + refused_busy.load(), 100);
  size_t total_tokens = 0;
  for (const char* id : {"s0", "s1", "s2"}) {
    auto s = store.checkout(id);
    ASSERT_TRUE(s.ok()) << s.status();
    total_tokens += (*s)->tokens.size();
    store.release(std::move(*s));
  }
  EXPECT_EQ(total_tokens, 3 * 8 + static_cast<size_t>(committed.load()));
  EXPECT_LE(store.memory_bytes(), one + one / 2);
}

// ---------------------------------------------------------------------------
// QuantizedKvCache::reserve

class QuantizedKvCacheReserve : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantizedKvCacheReserve, GrowingKeepsStoredTokensBitIdentical) {
  const KvGeometry g{3, 4, 2, 32, {}};
  const KvCodecConfig config = parse(GetParam());
  auto grown = QuantizedKvCache::Create(g, 0, config);   // grown from nothing, in steps
  auto direct = QuantizedKvCache::Create(g, 40, config);  // the whole capacity up front
  ASSERT_TRUE(grown.ok() && direct.ok());
  Rng rng(3);
  std::vector<float> k(static_cast<size_t>(40 * g.kv_dim())), v(k.size());  // f32 [40, kv_dim]
  for (float& x : k) x = static_cast<float>(rng.uniform() * 4 - 2);
  for (float& x : v) x = static_cast<float>(rng.uniform() * 4 - 2);
  int64_t stored = 0;
  for (const int64_t step : {7, 1, 20, 12}) {
    ASSERT_TRUE((*grown)->reserve((*grown)->capacity() + step).ok());
    ASSERT_EQ((*grown)->capacity(), stored + step);
    for (int layer = 0; layer < g.n_layer; ++layer) {
      const size_t offset = static_cast<size_t>(stored * g.kv_dim());
      ASSERT_TRUE((*grown)->store(layer, stored, step, k.data() + offset, v.data() + offset).ok());
      ASSERT_TRUE((*direct)->store(layer, stored, step, k.data() + offset, v.data() + offset).ok());
    }
    stored += step;
    (*grown)->set_size(stored);
    (*direct)->set_size(stored);
    expect_kv_identical(**grown, **direct);
  }
  EXPECT_EQ((*grown)->memory_bytes(), (*direct)->memory_bytes());
  // Never shrinks; negative is an error.
  ASSERT_TRUE((*grown)->reserve(5).ok());
  EXPECT_EQ((*grown)->capacity(), 40);
  EXPECT_EQ((*grown)->reserve(-1).code(), absl::StatusCode::kInvalidArgument);
  expect_kv_identical(**grown, **direct);
}

// ---------------------------------------------------------------------------
// Session directory caps (issue 15: "--max-sessions 1 with 20 ids left 21 files")

TEST_F(SessionStoreTest, FileCapKeepsTheMostRecentSessionsAndDeletesTheOldestIdleOnes) {
  SessionStoreOptions o = options(0, /*max_sessions=*/1);
  o.max_files = 4;
  SessionStore store(o, fingerprint_, geometry_);
  ASSERT_TRUE(store.open().ok());
  for (int i = 0; i < 20; ++i) {
    const std::string id = "id" + std::to_string(i);
    ASSERT_TRUE(store.reserve(id).ok());
    ASSERT_TRUE(store.commit(make_session(id, "int4-g16", 6, static_cast<uint64_t>(i) + 1)).ok());
    ASSERT_LE(dir_names(dir_).size(), 4u) << "after " << id;
  }
  EXPECT_EQ(dir_names(dir_), (std::vector<std::string>{"id16.session", "id17.session", "id18.session",
                                                       "id19.session"}));
  EXPECT_EQ(store.size(), 4u);  // deleted sessions are forgotten, not just their files
  EXPECT_FALSE(store.contains("id0"));
  EXPECT_EQ(store.checkout("id0").status().code(), absl::StatusCode::kNotFound);
  // A session in use is never the victim: id16 (the oldest) stays while checked out.
  auto busy = store.checkout("id16");
  ASSERT_TRUE(busy.ok()) << busy.status();
  ASSERT_TRUE(store.reserve("id20").ok());
  ASSERT_TRUE(store.commit(make_session("id20", "int4-g16", 6, 21)).ok());
  EXPECT_TRUE(store.contains("id16"));
  EXPECT_FALSE(store.contains("id17"));
  store.release(std::move(*busy));
  EXPECT_EQ(store.file_count(), 4u);
}

TEST_F(SessionStoreTest, DiskCapCountsBytesAndAppliesToFilesFoundAtOpen) {
  {
    SessionStore store(options(), fingerprint_, geometry_);  // no caps: 6 files
    ASSERT_TRUE(store.open().ok());
    for (int i = 0; i < 6; ++i) {
      const std::string id = "d" + std::to_string(i);
      ASSERT_TRUE(store.reserve(id).ok());
      ASSERT_TRUE(store.commit(make_session(id, "f16", 20, static_cast<uint64_t>(i) + 1)).ok());
    }
  }
  ASSERT_EQ(dir_names(dir_).size(), 6u);
  const uint64_t one_file = fs::file_size(path("d0"));
  SessionStoreOptions o = options();
  o.max_disk_bytes = 2 * one_file + one_file / 2;  // room for two
  SessionStore store(o, fingerprint_, geometry_);
  ASSERT_TRUE(store.open().ok());
  EXPECT_EQ(dir_names(dir_), (std::vector<std::string>{"d4.session", "d5.session"}));
  EXPECT_EQ(store.size(), 2u);
}

INSTANTIATE_TEST_SUITE_P(StoreCodecs, QuantizedKvCacheReserve,
                         ::testing::Values("f16", "int8-g32", "int4-g16", "int4-k8-g32", "int4-g32-had"),
                         [](const auto& test_param) {
                           std::string name = test_param.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace baton
