// The edge agent's prefix packs on the tiny synthetic model: a directory of
// pack files (made by write_kv_segment from an F32 cache, through
// KvPackFileWriter) is indexed from headers; load_into gives the source KV
// within the codec's error; packs of another model are refused naming the
// field; a pulled stream is stored only after its trailer verified (a
// truncated or corrupt one leaves no file and no index entry); the cap on
// pulled bytes deletes least recently used pulled packs, never hand-placed ones.
#include "edge_decode/store/pack_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/engine/sampler.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_pack_file.h"
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
using ::testing::HasSubstr;

// Small blocks so each layer's K and V span several of them.
constexpr uint64_t kBlockPayloadBytes = 700;

KvCodecConfig parse(const std::string& name) {
  auto c = parse_kv_codec_config(name);
  EXPECT_TRUE(c.ok()) << name << ": " << c.status();
  return *c;
}

std::vector<std::string> dir_names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class PackStoreTest : public testing::TinyModelTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(TinyModelTest::SetUp());
    dir_ = testing::make_temp_dir("packs");
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  std::vector<int32_t> tokens(int n, uint64_t seed) const {
    Rng rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng.next() % 512);
    return t;
  }

  // The F32 source: the engine's KV of `t`.
  std::unique_ptr<F32KvCache> source(const std::vector<int32_t>& t) {
    auto cache = std::make_unique<F32KvCache>(geometry_, static_cast<int64_t>(t.size()));
    EXPECT_TRUE(engine_->prefill(t, *cache, nullptr).ok());
    return cache;
  }

  // The messages of a pack stream of `t`'s KV.
  std::vector<v1::KvStreamMessage> pack_messages(const std::vector<int32_t>& t, const std::string& codec,
                                                 const ModelFingerprint* model = nullptr,
                                                 const std::string& pack_id = "") {
    auto cache = source(t);
    KvStreamHeaderInfo info;
    info.model = model ? *model : fingerprint_;
    info.codec = parse(codec);
    info.token_ids = t;
    info.prefix_digest = prefix_digest(t);
    info.pack_id = pack_id;
    info.description = "test pack " + pack_id;
    std::vector<v1::KvStreamMessage> messages;
    KvStreamWriter writer(
        [&](const v1::KvStreamMessage& m) {
          messages.push_back(m);
          return absl::OkStatus();
        },
        KvStreamWriterOptions{kBlockPayloadBytes});
    const absl::Status st = write_kv_segment(*cache, info, &rope_, writer);
    EXPECT_TRUE(st.ok()) << st;
    return messages;
  }

  // A pack file "<dir>/<id>.batonkv" written as a tool would.
  void write_pack(const std::string& id, const std::vector<int32_t>& t, const std::string& codec,
                  const ModelFingerprint* model = nullptr) {
    auto writer = KvPackFileWriter::create(dir_ + "/" + id + ".batonkv");
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (const auto& m : pack_messages(t, codec, model, id)) ASSERT_TRUE((*writer)->append(m).ok());
    ASSERT_TRUE((*writer)->commit().ok());
  }

  static KvMessageSource source_of(std::vector<v1::KvStreamMessage> messages) {
    auto shared = std::make_shared<std::vector<v1::KvStreamMessage>>(std::move(messages));
    auto next = std::make_shared<size_t>(0);
    return [shared, next]() -> absl::StatusOr<std::optional<v1::KvStreamMessage>> {
      if (*next == shared->size()) return std::nullopt;
      return std::optional<v1::KvStreamMessage>((*shared)[(*next)++]);
    };
  }

  ModelFingerprint other_model() const {
    ModelFingerprint other = fingerprint_;
    for (auto& [name, value] : other.fields) {
      if (name == "source_weights_digest") value = std::string(value.size(), 'e');
    }
    other.digest = to_hex(sha256(other.canonical()));
    return other;
  }

  PackStore make_store(uint64_t max_pulled_bytes = 0) const {
    PackStoreOptions o;
    o.dir = dir_;
    o.max_pulled_bytes = max_pulled_bytes;
    return PackStore(o, fingerprint_, geometry_, rope_);
  }

  std::string dir_;
};

struct CodecCase {
  const char* codec;
  double tolerance;  // max |x - source| over a layer's K or V, relative to its max |x|
};

class PackStoreLoad : public PackStoreTest, public ::testing::WithParamInterface<CodecCase> {};

TEST_P(PackStoreLoad, LoadIntoEqualsTheSourceWithinTheCodec) {
  const std::vector<int32_t> t = tokens(45, 3);
  write_pack("doc", t, GetParam().codec);
  PackStore store = make_store();
  std::vector<std::string> refused;
  ASSERT_TRUE(store.open(&refused).ok());
  EXPECT_TRUE(refused.empty());

  auto summary = store.find("doc");
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->tokens, t);
  EXPECT_EQ(summary->prefix_digest, prefix_digest(t));
  EXPECT_EQ(summary->codec, parse(GetParam().codec));
  EXPECT_EQ(summary->description, "test pack doc");
  EXPECT_FALSE(summary->pulled);
  EXPECT_EQ(summary->file_bytes, fs::file_size(dir_ + "/doc.batonkv"));
  EXPECT_EQ(store.list().size(), 1u);

  // Into an F32 cache: every row within the codec's error of the source.
  auto reference = source(t);
  F32KvCache f32(geometry_, 64);
  auto load = store.load_into("doc", f32);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(load->token_count, 45u);
  EXPECT_EQ(f32.size(), 45);
  const int64_t kv_dim = geometry_.kv_dim();
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {
    for (bool is_key : {true, false}) {
      double worst = 0, scale = 1e-6;  // over the layer's K or V
      for (int64_t pos = 0; pos < 45; ++pos) {
        const float* got = is_key ? f32.k_row(layer, pos) : f32.v_row(layer, pos);
        const float* want = is_key ? reference->k_row(layer, pos) : reference->v_row(layer, pos);
        for (int64_t i = 0; i < kv_dim; ++i) {
          worst = std::max(worst, std::fabs(double{got[i]} - want[i]));
          scale = std::max(scale, std::fabs(double{want[i]}));
        }
      }
      EXPECT_LE(worst / scale, GetParam().tolerance) << "layer " << layer << (is_key ? " K" : " V");
      EXPECT_GT(worst, 0.0) << "a lossy codec changed nothing: not the codec's output?";
    }
  }

  // Into the edge's quantized store: the same bytes as reading the stream
  // directly, and the target must be empty.
  const KvCodecConfig store_config = QuantizedKvCache::store_config_for(parse(GetParam().codec));
  auto quantized = QuantizedKvCache::Create(geometry_, 50, store_config);
  auto direct = QuantizedKvCache::Create(geometry_, 50, store_config);
  ASSERT_TRUE(quantized.ok() && direct.ok());
  ASSERT_TRUE(store.load_into("doc", **quantized).ok());
  KvStreamExpectation expected;
  expected.model = fingerprint_;
  const auto messages = pack_messages(t, GetParam().codec, nullptr, "doc");
  ASSERT_TRUE(read_kv_segment(messages, expected, &rope_, **direct).ok());
  ASSERT_EQ((*quantized)->size(), 45);
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {
    for (bool is_key : {true, false}) {
      auto a = (*quantized)->export_block(layer, is_key, 0, 45);
      auto b = (*direct)->export_block(layer, is_key, 0, 45);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(a->codes, b->codes);
      EXPECT_EQ(a->scales, b->scales);
      EXPECT_EQ(a->mins, b->mins);
    }
  }
  EXPECT_EQ(store.load_into("doc", **quantized).status().code(), absl::StatusCode::kFailedPrecondition);
  auto small = QuantizedKvCache::Create(geometry_, 44, store_config);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(store.load_into("doc", **small).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*small)->size(), 0);
  EXPECT_EQ(store.load_into("nope", **small).status().code(), absl::StatusCode::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(Codecs, PackStoreLoad,
                         ::testing::Values(CodecCase{"f16-z3", 1.0 / 2048}, CodecCase{"int8-g16-z3", 1.0 / 254 + 1e-3},
                                           CodecCase{"int4-pc-g16-z3", 1.0 / 15},
                                           CodecCase{"int4-g16-pre-z1", 1.0 / 15}),
                         [](const auto& test_param) {
                           std::string name = test_param.param.codec;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST_F(PackStoreTest, PackOfAnotherModelIsRefusedNamingTheField) {
  const ModelFingerprint other = other_model();
  write_pack("theirs", tokens(20, 1), "int8-g16-z3", &other);
  write_pack("ours", tokens(20, 2), "int8-g16-z3");
  write_pack("bad id!", tokens(20, 2), "int8-g16-z3");
  PackStore store = make_store();
  std::vector<std::string> refused;
  ASSERT_TRUE(store.open(&refused).ok());
  ASSERT_EQ(refused.size(), 2u);
  EXPECT_THAT(refused[0], HasSubstr("bad id!"));
  EXPECT_THAT(refused[1], HasSubstr("theirs.batonkv"));
  EXPECT_THAT(refused[1], HasSubstr("source_weights_digest"));
  EXPECT_EQ(store.find("theirs").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store.find("ours").ok());
  EXPECT_TRUE(fs::exists(dir_ + "/theirs.batonkv"));
}

TEST_F(PackStoreTest, ReplacedFileIsRefusedOnLoadWithTheTargetUnchanged) {
  write_pack("doc", tokens(30, 1), "f16-z3");
  PackStore store = make_store();
  ASSERT_TRUE(store.open().ok());
  write_pack("doc", tokens(30, 2), "f16-z3");  // other tokens behind the index's back
  auto kv = QuantizedKvCache::Create(geometry_, 40, parse("f16"));
  ASSERT_TRUE(kv.ok());
  const auto load = store.load_into("doc", **kv);
  EXPECT_EQ(load.status().code(), absl::StatusCode::kFailedPrecondition) << load.status();
  EXPECT_EQ((*kv)->size(), 0);
}

TEST_F(PackStoreTest, AddFromStreamStoresAVerifiedPack) {
  PackStore store = make_store();
  ASSERT_TRUE(store.open().ok());
  const std::vector<int32_t> t = tokens(33, 4);
  const auto messages = pack_messages(t, "int8-g16-z3", nullptr, "pulled");
  uint32_t last_blocks = 0;
  uint64_t last_bytes = 0;
  int calls = 0;
  auto added = store.add_from_stream("pulled", source_of(messages), false, [&](uint32_t blocks, uint64_t bytes) {
    EXPECT_EQ(blocks, last_blocks + 1);
    EXPECT_GT(bytes, last_bytes);
    last_blocks = blocks;
    last_bytes = bytes;
    ++calls;
  });
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(static_cast<size_t>(calls), messages.size() - 2);
  EXPECT_TRUE(added->pulled);
  EXPECT_EQ(added->tokens, t);
  EXPECT_EQ(added->file_bytes, fs::file_size(dir_ + "/pulled.batonkv"));
  EXPECT_EQ(dir_names(dir_), (std::vector<std::string>{"pulled.batonkv", "pulled.batonkv.pulled"}));
  auto kv = QuantizedKvCache::Create(geometry_, 40, parse("int8-g16"));
  ASSERT_TRUE(kv.ok());
  ASSERT_TRUE(store.load_into("pulled", **kv).ok());
  EXPECT_EQ((*kv)->size(), 33);

  EXPECT_EQ(store.add_from_stream("pulled", source_of(messages), false).status().code(),
            absl::StatusCode::kAlreadyExists);
  const auto replacement = pack_messages(tokens(12, 5), "f16-z3", nullptr, "pulled");
  auto replaced = store.add_from_stream("pulled", source_of(replacement), true);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_EQ(store.find("pulled")->tokens.size(), 12u);
  EXPECT_EQ(store.list().size(), 1u);

  // A restart sees the same packs, the pulled one still marked.
  PackStore reopened = make_store();
  ASSERT_TRUE(reopened.open().ok());
  auto found = reopened.find("pulled");
  ASSERT_TRUE(found.ok());
  EXPECT_TRUE(found->pulled);
  EXPECT_EQ(found->tokens.size(), 12u);
}

TEST_F(PackStoreTest, BadStreamsLeaveNoFileAndNoIndexEntry) {
  PackStore store = make_store();
  ASSERT_TRUE(store.open().ok());
  const auto good = pack_messages(tokens(33, 6), "int4-g16-z3", nullptr, "p");
  ASSERT_GT(good.size(), 6u);
  struct Case {
    const char* what;
    std::vector<v1::KvStreamMessage> messages;
  };
  std::vector<Case> cases;
  cases.push_back({"no trailer", {good.begin(), good.end() - 1}});
  cases.push_back({"a block missing", good});
  cases.back().messages.erase(cases.back().messages.begin() + 3);
  cases.push_back({"a flipped payload byte", good});
  {
    std::string* payload = cases.back().messages[2].mutable_block()->mutable_payload();
    (*payload)[payload->size() / 2] ^= 0x20;
  }
  cases.push_back({"a wrong trailer digest", good});
  cases.back().messages.back().mutable_trailer()->set_stream_digest(12345);
  const ModelFingerprint other = other_model();
  cases.push_back({"another model", pack_messages(tokens(33, 6), "int4-g16-z3", &other, "p")});
  cases.push_back({"only a header", {good.front()}});
  for (const Case& c : cases) {
    auto added = store.add_from_stream("p", source_of(c.messages), false);
    EXPECT_FALSE(added.ok()) << c.what;
    EXPECT_EQ(dir_names(dir_), std::vector<std::string>{}) << c.what;
    EXPECT_EQ(store.find("p").status().code(), absl::StatusCode::kNotFound) << c.what;
  }
  // A source that fails mid-stream (the cloud went away).
  size_t next = 0;
  const KvMessageSource failing = [&]() -> absl::StatusOr<std::optional<v1::KvStreamMessage>> {
    if (next == 4) return absl::UnavailableError("connection reset");
    return std::optional<v1::KvStreamMessage>(good[next++]);
  };
  auto added = store.add_from_stream("p", failing, false);
  EXPECT_EQ(added.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(dir_names(dir_), std::vector<std::string>{});
  EXPECT_TRUE(store.list().empty());
  EXPECT_EQ(store.add_from_stream("../p", source_of(good), false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PackStoreTest, PulledBytesCapDeletesLeastRecentlyUsedPulledPacksOnly) {
  write_pack("manual", tokens(40, 1), "f16-z3");  // placed by hand: never deleted
  const auto a = pack_messages(tokens(20, 2), "int8-g16-z3", nullptr, "a");
  const auto b = pack_messages(tokens(20, 3), "int8-g16-z3", nullptr, "b");
  const auto c = pack_messages(tokens(20, 4), "int8-g16-z3", nullptr, "c");
  uint64_t one = 0;
  {
    PackStore probe = make_store();
    ASSERT_TRUE(probe.open().ok());
    auto added = probe.add_from_stream("probe", source_of(a), false);
    ASSERT_TRUE(added.ok());
    one = added->file_bytes;
    fs::remove(dir_ + "/probe.batonkv");
    fs::remove(dir_ + "/probe.batonkv.pulled");
  }
  PackStore store = make_store(2 * one + one / 2);  // room for two pulled packs
  ASSERT_TRUE(store.open().ok());
  ASSERT_TRUE(store.add_from_stream("a", source_of(a), false).ok());
  ASSERT_TRUE(store.add_from_stream("b", source_of(b), false).ok());
  auto kv = QuantizedKvCache::Create(geometry_, 40, parse("int8-g16"));
  ASSERT_TRUE(kv.ok());
  ASSERT_TRUE(store.load_into("a", **kv).ok());  // a is now more recent than b
  ASSERT_TRUE(store.add_from_stream("c", source_of(c), false).ok());
  EXPECT_TRUE(store.find("a").ok());
  EXPECT_EQ(store.find("b").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store.find("c").ok());
  EXPECT_TRUE(store.find("manual").ok());
  EXPECT_EQ(dir_names(dir_), (std::vector<std::string>{"a.batonkv", "a.batonkv.pulled", "c.batonkv",
                                                        "c.batonkv.pulled", "manual.batonkv"}));

  // A pack larger than the whole cap is refused and leaves nothing.
  PackStore tiny = make_store(one / 2);
  ASSERT_TRUE(tiny.open().ok());
  EXPECT_EQ(tiny.add_from_stream("big", source_of(b), false).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(fs::exists(dir_ + "/big.batonkv"));
  EXPECT_TRUE(tiny.find("a").ok());  // nothing else was deleted for it
}

// A pull whose header declares more KV than the cap (or the memory budget)
// is refused after the header: no block is read, no byte is written.
TEST_F(PackStoreTest, PulledPackOverTheCapIsRefusedAtItsHeaderBeforeAnyBlockOrFile) {
  const auto messages = pack_messages(tokens(60, 8), "int8-g16-z3", nullptr, "big");
  auto raw = kv_header_raw_bytes(messages.front().header(), geometry_);
  ASSERT_TRUE(raw.ok()) << raw.status();
  for (const bool memory : {false, true}) {
    PackStoreOptions o;
    o.dir = dir_;
    (memory ? o.max_pack_memory_bytes : o.max_pulled_bytes) = *raw / 2;
    PackStore store(o, fingerprint_, geometry_, rope_);
    ASSERT_TRUE(store.open().ok());
    size_t reads = 0;
    const KvMessageSource counted = [&, next = size_t{0}]() mutable
        -> absl::StatusOr<std::optional<v1::KvStreamMessage>> {
      ++reads;
      if (next == messages.size()) return std::nullopt;
      return std::optional<v1::KvStreamMessage>(messages[next++]);
    };
    auto added = store.add_from_stream("big", counted, false);
    ASSERT_EQ(added.status().code(), absl::StatusCode::kResourceExhausted) << added.status();
    EXPECT_THAT(std::string(added.status().message()), HasSubstr("declares 60 tokens"));
    EXPECT_EQ(reads, 1u) << "only the header may be read";
    EXPECT_EQ(dir_names(dir_), std::vector<std::string>{}) << "nothing may be written";
    EXPECT_EQ(store.find("big").status().code(), absl::StatusCode::kNotFound);
  }
  // Within both caps the same pack is stored.
  PackStoreOptions o;
  o.dir = dir_;
  o.max_pulled_bytes = *raw * 2;
  o.max_pack_memory_bytes = *raw * 2;
  PackStore store(o, fingerprint_, geometry_, rope_);
  ASSERT_TRUE(store.open().ok());
  EXPECT_TRUE(store.add_from_stream("big", source_of(messages), false).ok());
}

TEST_F(PackStoreTest, NoDirMeansNoPacks) {
  PackStore store(PackStoreOptions{}, fingerprint_, geometry_, rope_);
  ASSERT_TRUE(store.open().ok());
  EXPECT_TRUE(store.list().empty());
  EXPECT_EQ(store.find("x").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.add_from_stream("x", source_of({}), false).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace baton
