// KV stream writer -> reader round trips, every corruption the reader must
// reject (and never commit), and prefix pack files.
#include <sys/stat.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/kv_stream/kv_fingerprint.h"
#include "common/kv_stream/kv_pack_file.h"
#include "common/kv_stream/kv_stream.h"
#include "common/kv_stream/kv_stream_reader.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/kv_stream/prefix_digest.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kLayers = 3;
constexpr uint32_t kHeadsKv = 2;
constexpr uint32_t kHeadDim = 8;
constexpr uint64_t kF16BytesPerToken = uint64_t{kHeadsKv} * kHeadDim * 2;  // f16 [H, D] per token

ModelFingerprint test_model(uint32_t n_head_kv = kHeadsKv) {
  ModelFingerprint fp;
  fp.fields = {{"version", "1"},
               {"arch", "llama"},
               {"n_layer", std::to_string(kLayers)},
               {"n_head", "4"},
               {"n_head_kv", std::to_string(n_head_kv)},
               {"head_dim", std::to_string(kHeadDim)},
               {"n_vocab", "1000"}};
  fp.digest = to_hex(sha256(fp.canonical()));
  return fp;
}

v1::CodecParams f16_codec() {
  v1::CodecParams codec;
  codec.set_codec(v1::KV_CODEC_F16);
  codec.set_zstd_level(0);
  return codec;
}

v1::CodecParams int8_per_channel_codec() {
  v1::CodecParams codec;
  codec.set_codec(v1::KV_CODEC_INT8);
  codec.set_group_size(32);
  codec.set_key_axis(v1::KEY_AXIS_PER_CHANNEL);
  codec.set_zstd_level(0);
  return codec;
}

// Stand-in payload of a block: deterministic bytes, f16-sized.
std::string fake_payload(uint32_t layer, v1::KvKind kind, uint32_t begin, uint32_t n_tokens) {
  std::mt19937_64 rng(layer * 1000003ull + static_cast<uint64_t>(kind) * 7919ull + begin);
  std::string payload(n_tokens * kF16BytesPerToken, '\0');
  for (char& c : payload) c = static_cast<char>(rng());
  return payload;
}

struct StreamSpec {
  uint32_t first_position = 0;
  uint32_t token_count = 200;
  uint64_t max_block_payload_bytes = 64 * kF16BytesPerToken;  // 64 tokens per block
  uint64_t planned_bytes_per_token = kF16BytesPerToken;
  v1::CodecParams codec = f16_codec();
  std::string pack_id = "system-prompt.v1";
};

std::vector<int32_t> test_tokens(uint32_t n) {
  std::vector<int32_t> tokens(n);
  for (uint32_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>((i * 37 + 11) % 1000);
  return tokens;
}

// All tokens [0, end) of the conversation the spec's segment belongs to.
std::vector<int32_t> prefix_tokens(const StreamSpec& spec) { return test_tokens(spec.first_position + spec.token_count); }

std::vector<v1::KvStreamMessage> make_stream(const StreamSpec& spec = {}) {
  const std::vector<int32_t> tokens = prefix_tokens(spec);
  KvFingerprint fp;
  fp.model = test_model();
  fp.context = {spec.first_position, spec.token_count, prefix_digest(tokens)};
  fp.codec = spec.codec;
  v1::KvHeader header;
  set_header_fingerprint(fp, &header);
  for (uint32_t i = spec.first_position; i < tokens.size(); ++i) header.add_token_ids(static_cast<uint32_t>(tokens[i]));
  header.set_pack_id(spec.pack_id);
  header.set_description("test stream");

  std::vector<v1::KvStreamMessage> messages;
  KvStreamWriter writer([&](const v1::KvStreamMessage& m) { messages.push_back(m); return absl::OkStatus(); },
                        {.max_block_payload_bytes = spec.max_block_payload_bytes});
  EXPECT_TRUE(writer.write_header(header).ok());
  for (uint32_t layer = 0; layer < kLayers; ++layer) {
    for (v1::KvKind kind : {v1::KV_KIND_K, v1::KV_KIND_V}) {
      auto encode = [&](uint32_t begin, uint32_t n) -> absl::StatusOr<KvEncodedPayload> {
        std::string payload = fake_payload(layer, kind, begin, n);
        const uint64_t raw = payload.size();
        return KvEncodedPayload{std::move(payload), raw};
      };
      const absl::Status status = writer.write_layer(layer, kind, spec.planned_bytes_per_token, encode);
      EXPECT_TRUE(status.ok()) << status;
    }
  }
  v1::ProducerStats producer;
  producer.set_backend("test");
  EXPECT_TRUE(writer.write_trailer(&producer).ok());
  return messages;
}

KvStreamExpectation expectation(const StreamSpec& spec = {}) {
  const std::vector<int32_t> tokens = prefix_tokens(spec);
  KvStreamExpectation expected;
  expected.model = test_model();
  expected.first_position = spec.first_position;
  expected.token_ids = std::vector<int32_t>(tokens.begin() + spec.first_position, tokens.end());
  expected.prefix_digest = prefix_digest(tokens);
  expected.codec = spec.codec;
  return expected;
}

KvStreamReaderOptions reader_options() {
  KvStreamReaderOptions options;
  options.expected_raw_size = [](const v1::CodecParams&, v1::KvKind, uint32_t n_tokens) -> absl::StatusOr<uint64_t> {
    return n_tokens * kF16BytesPerToken;
  };
  return options;
}

// Recomputes the trailer from the blocks present (to build streams whose only
// fault is in the blocks).
void rewrite_trailer(std::vector<v1::KvStreamMessage>& messages) {
  KvStreamDigest digest;
  uint32_t count = 0;
  uint64_t encoded = 0, raw = 0;
  for (const v1::KvStreamMessage& m : messages) {
    if (!m.has_block()) continue;
    digest.add_block(m.block());
    ++count;
    encoded += m.block().encoded_size();
    raw += m.block().raw_size();
  }
  ASSERT_TRUE(messages.back().has_trailer());
  v1::KvTrailer* trailer = messages.back().mutable_trailer();
  trailer->set_block_count(count);
  trailer->set_stream_digest(digest.value());
  trailer->set_encoded_bytes(encoded);
  trailer->set_raw_bytes(raw);
}

// Index of the first block message of (layer, kind) covering `position`.
size_t find_block(const std::vector<v1::KvStreamMessage>& messages, uint32_t layer, v1::KvKind kind,
                  uint32_t position) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const v1::KvStreamMessage& m = messages[i];
    if (m.has_block() && m.block().layer() == layer && m.block().kind() == kind && m.block().token_begin() <= position &&
        position < m.block().token_begin() + m.block().token_count()) {
      return i;
    }
  }
  ADD_FAILURE() << "no block covers layer " << layer << " position " << position;
  return 0;
}

absl::StatusOr<KvSegment> read_all(KvStreamReader& reader, std::vector<v1::KvStreamMessage> messages) {
  for (v1::KvStreamMessage& m : messages) {
    absl::Status status = reader.consume(std::move(m));
    if (!status.ok()) return status;
  }
  return reader.commit();
}

// The stream must be rejected with `code` and a message containing `text`,
// and nothing may be committed afterwards.
void expect_rejected(std::vector<v1::KvStreamMessage> messages, absl::StatusCode code, const std::string& text,
                     KvStreamExpectation expected = expectation(), KvStreamReaderOptions options = reader_options()) {
  KvStreamReader reader(std::move(expected), std::move(options));
  auto segment = read_all(reader, std::move(messages));
  ASSERT_FALSE(segment.ok()) << "stream was accepted; expected: " << text;
  EXPECT_EQ(segment.status().code(), code) << segment.status();
  EXPECT_THAT(segment.status().message(), HasSubstr(text));
  EXPECT_EQ(reader.staged_blocks(), 0u);
  EXPECT_FALSE(reader.complete());
  EXPECT_FALSE(reader.commit().ok());
  EXPECT_FALSE(reader.consume(v1::KvStreamMessage()).ok());  // sticky
}

// ---------------------------------------------------------------------------
// Round trips

TEST(KvStream, RoundTripMultiLayerMultiBlockCommitsEveryBlock) {
  const std::vector<v1::KvStreamMessage> messages = make_stream();
  // 200 tokens in blocks of 64: 4 blocks per (layer, kind).
  ASSERT_EQ(messages.size(), 2u + kLayers * 2 * 4);
  EXPECT_TRUE(messages.front().has_header());
  EXPECT_TRUE(messages.back().has_trailer());
  for (const v1::KvStreamMessage& m : messages) {
    if (m.has_block()) {
      EXPECT_LE(m.block().payload().size(), 64 * kF16BytesPerToken);
    }
  }

  KvStreamReader reader(expectation(), reader_options());
  auto segment = read_all(reader, messages);
  ASSERT_TRUE(segment.ok()) << segment.status();
  EXPECT_EQ(segment->blocks.size(), kLayers * 2 * 4u);
  EXPECT_EQ(segment->header.pack_id(), "system-prompt.v1");
  EXPECT_EQ(segment->trailer.producer().backend(), "test");
  EXPECT_EQ(segment->raw_bytes, kLayers * 2 * 200 * kF16BytesPerToken);
  EXPECT_EQ(segment->encoded_bytes, segment->raw_bytes);
  for (const KvStagedBlock& block : segment->blocks) {
    EXPECT_EQ(block.payload, fake_payload(block.layer, block.kind, block.token_begin, block.token_count));
  }
  EXPECT_FALSE(reader.commit().ok());  // handed over once
}

TEST(KvStream, RoundTripOfADeltaSegmentAfterPosition100) {
  StreamSpec spec;
  spec.first_position = 100;
  spec.token_count = 70;
  KvStreamReader reader(expectation(spec), reader_options());
  auto segment = read_all(reader, make_stream(spec));
  ASSERT_TRUE(segment.ok()) << segment.status();
  EXPECT_EQ(segment->fingerprint.context.first_position, 100u);
  EXPECT_EQ(segment->blocks.front().token_begin, 100u);
}

TEST(KvStream, PackStyleExpectationAcceptsTheHeadersOwnContext) {
  KvStreamExpectation expected;
  expected.model = test_model();
  KvStreamReader reader(expected, reader_options());
  auto segment = read_all(reader, make_stream());
  ASSERT_TRUE(segment.ok()) << segment.status();
  EXPECT_EQ(segment->header.token_ids_size(), 200);
}

TEST(KvStream, WriterHalvesBlocksWhoseEncodingOutgrowsTheEstimate) {
  StreamSpec spec;
  spec.planned_bytes_per_token = kF16BytesPerToken / 2;  // plans 128-token blocks; they encode to 2x the bound
  const std::vector<v1::KvStreamMessage> messages = make_stream(spec);
  for (const v1::KvStreamMessage& m : messages) {
    if (m.has_block()) {
      EXPECT_LE(m.block().payload().size(), spec.max_block_payload_bytes);
    }
  }
  KvStreamReader reader(expectation(spec), reader_options());
  EXPECT_TRUE(read_all(reader, messages).ok());
}

TEST(KvStream, PlanSplitsIntoAlignedChunksUnderTheBound) {
  const std::vector<KvTokenRange> plan = plan_kv_block_ranges(10, 100, 32, 1000, 8);
  // 1000 / 32 = 31 tokens fit; aligned down to 24.
  ASSERT_EQ(plan.size(), 5u);
  EXPECT_EQ(plan[0], (KvTokenRange{10, 24}));
  EXPECT_EQ(plan[4], (KvTokenRange{106, 4}));
  EXPECT_EQ(plan_kv_block_ranges(0, 5, 1u << 30, 1000, 1).size(), 5u);  // at least one token per block
}

TEST(KvStream, WriterRejectsAPayloadOverTheBound) {
  std::vector<v1::KvStreamMessage> sink;
  KvStreamWriter writer([&](const v1::KvStreamMessage& m) { sink.push_back(m); return absl::OkStatus(); },
                        {.max_block_payload_bytes = 16});
  v1::KvHeader header = make_stream().front().header();
  ASSERT_TRUE(writer.write_header(header).ok());
  EXPECT_EQ(writer.write_block(0, v1::KV_KIND_K, 0, 1, std::string(17, 'x'), 17).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(writer.write_block(0, v1::KV_KIND_K, 199, 2, "x", 1).code(), absl::StatusCode::kInvalidArgument);
  auto too_big = [](uint32_t, uint32_t n) -> absl::StatusOr<KvEncodedPayload> {
    return KvEncodedPayload{std::string(100, 'x'), 100};
  };
  EXPECT_EQ(writer.write_layer(0, v1::KV_KIND_K, 1, too_big).code(), absl::StatusCode::kResourceExhausted);
}

// ---------------------------------------------------------------------------
// Fingerprint and context mismatches

TEST(KvStreamReject, WrongModelField) {
  KvStreamExpectation expected = expectation();
  expected.model = test_model(4);
  expect_rejected(make_stream(), absl::StatusCode::kFailedPrecondition,
                  "model fingerprint mismatch: n_head_kv is 4 here, 2 in the KV stream", expected);
}

TEST(KvStreamReject, WrongTokenIds) {
  KvStreamExpectation expected = expectation();
  (*expected.token_ids)[7] += 1;
  expected.prefix_digest.reset();  // so the ids themselves are compared
  expect_rejected(make_stream(), absl::StatusCode::kFailedPrecondition, "token_ids[7] (position 7)", expected);
}

TEST(KvStreamReject, WrongTokenCount) {
  KvStreamExpectation expected = expectation();
  expected.token_ids->pop_back();
  expect_rejected(make_stream(), absl::StatusCode::kFailedPrecondition,
                  "context mismatch: token_count is 199 here, 200 in the KV stream", expected);
}

TEST(KvStreamReject, WrongPrefixDigest) {
  KvStreamExpectation expected = expectation();
  std::vector<int32_t> other = test_tokens(200);
  other[0] += 1;
  expected.prefix_digest = prefix_digest(other);
  expect_rejected(make_stream(), absl::StatusCode::kFailedPrecondition, "context mismatch: prefix_digest is", expected);
}

TEST(KvStreamReject, WrongFirstPosition) {
  StreamSpec spec;
  spec.first_position = 64;
  KvStreamExpectation expected = expectation(spec);
  expected.first_position = 60;
  expect_rejected(make_stream(spec), absl::StatusCode::kFailedPrecondition,
                  "context mismatch: first_position is 60 here, 64 in the KV stream", expected);
}

TEST(KvStreamReject, WrongCodec) {
  KvStreamExpectation expected = expectation();
  expected.codec = int8_per_channel_codec();
  expect_rejected(make_stream(), absl::StatusCode::kFailedPrecondition,
                  "codec mismatch: codec is int8 here, f16 in the KV stream", expected);
}

TEST(KvStreamReject, PrefixDigestThatDoesNotHashTheStreamsOwnTokens) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  // A consistent fingerprint over a wrong digest: only the ids can tell.
  v1::KvHeader& header = *messages[0].mutable_header();
  KvFingerprint fp = *kv_fingerprint_from_header(header);
  fp.context.prefix_digest = sha256("not these tokens");
  set_header_fingerprint(fp, &header);
  KvStreamExpectation expected;
  expected.model = test_model();
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "but its token ids [0, 200) hash to", expected);
}

TEST(KvStreamReject, HeaderEditedBehindTheFingerprint) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages[0].mutable_header()->set_first_position(1);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "context_digest");
}

TEST(KvStreamReject, UnknownFormatVersion) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages[0].mutable_header()->set_format_version(3);
  expect_rejected(messages, absl::StatusCode::kFailedPrecondition,
                  "format_version is 3; this build reads versions 1 and 2");
}

// Version 2 is for models with sliding-window layers only.
TEST(KvStreamReject, WindowedVersionForAFullAttentionModel) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages[0].mutable_header()->set_format_version(2);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "format_version is 2 but its model has no");
}

TEST(KvStreamReject, TokenIdsCountDiffersFromTokenCount) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages[0].mutable_header()->add_token_ids(5);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "201 token_ids for token_count 200");
}

TEST(KvStreamReject, TokenIdOutsideTheVocabulary) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages[0].mutable_header()->set_token_ids(3, 5000);
  KvStreamExpectation expected;
  expected.model = test_model();
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "outside the vocabulary (n_vocab 1000)", expected);
}

TEST(KvStreamReject, SegmentOverTheTokenLimit) {
  KvStreamReaderOptions options = reader_options();
  options.max_segment_tokens = 100;
  expect_rejected(make_stream(), absl::StatusCode::kResourceExhausted,
                  "200 tokens; the limit is 100 (max_segment_tokens)", expectation(), options);
}

TEST(KvStreamReject, BadPackId) {
  StreamSpec spec;
  spec.pack_id = "../etc/passwd";
  expect_rejected(make_stream(spec), absl::StatusCode::kInvalidArgument, "pack_id has character 0x2f");
}

// ---------------------------------------------------------------------------
// Blocks

TEST(KvStreamReject, MissingBlock) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages.erase(messages.begin() + static_cast<ptrdiff_t>(find_block(messages, 1, v1::KV_KIND_V, 64)));
  rewrite_trailer(messages);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "missing layer 1 V tokens [64, 128)");
}

TEST(KvStreamReject, MissingLastBlockWithTheOriginalTrailer) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages.erase(messages.end() - 2);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "missing layer 2 V tokens [192, 200)");
}

TEST(KvStreamReject, DuplicateBlock) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  const size_t i = find_block(messages, 0, v1::KV_KIND_K, 0);
  messages.insert(messages.begin() + static_cast<ptrdiff_t>(i) + 1, messages[i]);
  rewrite_trailer(messages);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument,
                  "block layer 0 K [0, 64) overlaps an earlier block covering [0, 64)");
}

TEST(KvStreamReject, OverlappingBlock) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  v1::KvBlock* block = messages[find_block(messages, 2, v1::KV_KIND_K, 64)].mutable_block();
  block->set_token_begin(60);  // [60, 124) overlaps [0, 64)
  rewrite_trailer(messages);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument,
                  "block layer 2 K [60, 124) overlaps an earlier block covering [0, 64)");
}

TEST(KvStreamReject, BlockLayerOutOfRange) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages[find_block(messages, 2, v1::KV_KIND_V, 0)].mutable_block()->set_layer(3);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "layer 3 is out of range (n_layer 3)");
}

TEST(KvStreamReject, BlockTokenRangeOutsideTheSegment) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages[find_block(messages, 0, v1::KV_KIND_V, 192)].mutable_block()->set_token_count(9);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "[192, 201): token range is empty or outside the segment [0, 200)");
  messages = make_stream();
  messages[find_block(messages, 0, v1::KV_KIND_V, 192)].mutable_block()->set_token_begin(0xFFFFFFF0u);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "outside the segment");
}

TEST(KvStreamReject, BlockWithUnknownKind) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages[1].mutable_block()->set_kind(static_cast<v1::KvKind>(7));
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "kind unknown(7) is neither K nor V");
}

TEST(KvStreamReject, BadChecksum) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  (*messages[5].mutable_block()->mutable_payload())[10] ^= 0x40;
  expect_rejected(messages, absl::StatusCode::kDataLoss, "payload checksum is");
}

TEST(KvStreamReject, PayloadSizeDiffersFromEncodedSize) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages[2].mutable_block()->mutable_payload()->pop_back();
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "payload has 2047 bytes but encoded_size is 2048");
}

TEST(KvStreamReject, RawSizeNotWhatTheCodecNeeds) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  v1::CodecParams codec = f16_codec();
  codec.set_zstd_level(3);
  StreamSpec spec;
  spec.codec = codec;
  messages = make_stream(spec);
  messages[2].mutable_block()->set_raw_size(2000);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "raw_size is 2000; codec f16 needs exactly 2048 bytes",
                  expectation(spec));
}

TEST(KvStreamReject, RawSizeDiffersFromEncodedSizeWithoutCompression) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages[2].mutable_block()->set_raw_size(4096);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "although payloads are not compressed");
}

TEST(KvStreamReject, RawSizeOverTheCap) {
  StreamSpec spec;
  spec.codec.set_zstd_level(3);
  std::vector<v1::KvStreamMessage> messages = make_stream(spec);
  messages[2].mutable_block()->set_raw_size(uint64_t{1} << 40);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "(max_block_raw_bytes)", expectation(spec));
}

TEST(KvStreamReject, OversizedMessage) {
  KvStreamReaderOptions options = reader_options();
  options.max_message_bytes = 1024;
  expect_rejected(make_stream(), absl::StatusCode::kResourceExhausted, "the limit is 1024 (max_message_bytes)",
                  expectation(), options);
}

TEST(KvStreamReject, TooManyBlocks) {
  KvStreamReaderOptions options = reader_options();
  options.max_blocks = 5;
  expect_rejected(make_stream(), absl::StatusCode::kResourceExhausted, "more than 5 blocks (max_blocks)",
                  expectation(), options);
}

TEST(KvStreamReject, PerChannelKeyBlocksMustBeWholeGroups) {
  StreamSpec spec;
  spec.codec = int8_per_channel_codec();
  KvStreamReaderOptions options = reader_options();
  std::vector<v1::KvStreamMessage> messages = make_stream(spec);
  KvStreamReader good(expectation(spec), options);
  ASSERT_TRUE(read_all(good, messages).ok());
  // Split the first K block [0, 64) into [0, 20) + [20, 64).
  const size_t i = find_block(messages, 0, v1::KV_KIND_K, 0);
  v1::KvStreamMessage second = messages[i];
  auto set_range = [](v1::KvStreamMessage& m, uint32_t begin, uint32_t count) {
    v1::KvBlock* b = m.mutable_block();
    b->set_token_begin(begin);
    b->set_token_count(count);
    b->set_payload(fake_payload(b->layer(), b->kind(), begin, count));
    b->set_encoded_size(b->payload().size());
    b->set_raw_size(b->payload().size());
    b->set_checksum(kv_payload_checksum(b->payload()));
  };
  set_range(messages[i], 0, 20);
  set_range(second, 20, 44);
  messages.insert(messages.begin() + static_cast<ptrdiff_t>(i) + 1, second);
  rewrite_trailer(messages);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument,
                  "token_count 20 is not a multiple of the per-channel key group size 32", expectation(spec), options);
}

// ---------------------------------------------------------------------------
// Trailer and message order

TEST(KvStreamReject, TrailerBlockCountMismatch) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages.back().mutable_trailer()->set_block_count(25);
  expect_rejected(messages, absl::StatusCode::kDataLoss, "trailer block_count is 25 but 24 blocks were received");
}

TEST(KvStreamReject, TrailerDigestMismatch) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages.back().mutable_trailer()->set_stream_digest(messages.back().trailer().stream_digest() ^ 1);
  expect_rejected(messages, absl::StatusCode::kDataLoss, "stream_digest is");
}

TEST(KvStreamReject, BlocksReorderedBehindTheTrailersBack) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  std::swap(messages[1], messages[2]);  // same coverage, different order: only the digest notices
  expect_rejected(messages, absl::StatusCode::kDataLoss, "stream_digest is");
}

TEST(KvStreamReject, TrailerByteTotalsMismatch) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages.back().mutable_trailer()->set_raw_bytes(1);
  expect_rejected(messages, absl::StatusCode::kDataLoss, "trailer raw_bytes is 1");
  messages = make_stream();
  messages.back().mutable_trailer()->set_encoded_bytes(1);
  expect_rejected(messages, absl::StatusCode::kDataLoss, "trailer encoded_bytes is 1");
}

TEST(KvStreamReject, BlockBeforeHeader) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  std::swap(messages[0], messages[1]);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "starts with a block; the header must come first");
}

TEST(KvStreamReject, TrailerFirst) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages.insert(messages.begin(), messages.back());
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "starts with a trailer");
}

TEST(KvStreamReject, SecondHeader) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages.insert(messages.begin() + 3, messages[0]);
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "second header");
}

TEST(KvStreamReject, MessageAfterTrailer) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages.push_back(messages.back());
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "message after its trailer");
}

TEST(KvStreamReject, EmptyMessage) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages.insert(messages.begin() + 1, v1::KvStreamMessage());
  expect_rejected(messages, absl::StatusCode::kInvalidArgument, "has no header, block or trailer");
}

TEST(KvStreamReject, TruncatedStreamWithoutTrailer) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  messages.pop_back();
  expect_rejected(messages, absl::StatusCode::kDataLoss, "ended before its trailer (24 blocks received)");
  expect_rejected({}, absl::StatusCode::kDataLoss, "ended before its header");
}

TEST(KvStreamReject, AbandonDiscardsTheStaging) {
  std::vector<v1::KvStreamMessage> messages = make_stream();
  KvStreamReader reader(expectation(), reader_options());
  for (size_t i = 0; i + 1 < messages.size(); ++i) ASSERT_TRUE(reader.consume(messages[i]).ok());
  EXPECT_EQ(reader.staged_blocks(), 24u);
  EXPECT_EQ(reader.abandon(absl::CancelledError("client went away")).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(reader.staged_blocks(), 0u);
  EXPECT_EQ(reader.consume(messages.back()).code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(reader.commit().ok());
}

// ---------------------------------------------------------------------------
// Prefix pack files

std::string write_pack(const std::string& path, const std::vector<v1::KvStreamMessage>& messages) {
  auto writer = KvPackFileWriter::create(path);
  EXPECT_TRUE(writer.ok()) << writer.status();
  for (const v1::KvStreamMessage& m : messages) EXPECT_TRUE((*writer)->append(m).ok());
  EXPECT_TRUE((*writer)->commit().ok());
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(KvPackFile, RoundTripThroughAFileWithMode0600) {
  const std::string dir = testing::make_temp_dir("kv_pack");
  const std::string path = dir + "/system.kvpack";
  const std::string bytes = write_pack(path, make_stream());
  EXPECT_EQ(bytes.substr(0, 8), "BATONKV1");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().string(), path) << "temp file left behind";
  }

  auto segment = read_kv_pack_file(path, expectation(), reader_options());
  ASSERT_TRUE(segment.ok()) << segment.status();
  EXPECT_EQ(segment->blocks.size(), 24u);
  for (const KvStagedBlock& block : segment->blocks) {
    EXPECT_EQ(block.payload, fake_payload(block.layer, block.kind, block.token_begin, block.token_count));
  }
  auto header = read_kv_pack_header(path);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->pack_id(), "system-prompt.v1");
}

TEST(KvPackFile, WriterStreamsFromKvStreamWriterAndCleansUpWithoutCommit) {
  const std::string dir = testing::make_temp_dir("kv_pack_sink");
  const std::string path = dir + "/p.kvpack";
  {
    auto pack = KvPackFileWriter::create(path);
    ASSERT_TRUE(pack.ok());
    KvStreamWriter writer((*pack)->sink());
    ASSERT_TRUE(writer.write_header(make_stream().front().header()).ok());
    // dropped without commit
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(KvPackFile, EveryTruncationIsRejected) {
  StreamSpec spec;
  spec.token_count = 40;
  spec.max_block_payload_bytes = 16 * kF16BytesPerToken;
  const std::string path = testing::make_temp_dir("kv_pack_trunc") + "/t.kvpack";
  const std::string bytes = write_pack(path, make_stream(spec));
  for (size_t n = 0; n < bytes.size(); ++n) {
    KvStreamReader reader(expectation(spec), reader_options());
    auto segment = read_kv_pack(std::string_view(bytes.data(), n), &reader);
    ASSERT_FALSE(segment.ok()) << "a pack cut at " << n << " of " << bytes.size() << " bytes was accepted";
    EXPECT_EQ(reader.staged_blocks(), 0u);
  }
  KvStreamReader reader(expectation(spec), reader_options());
  EXPECT_TRUE(read_kv_pack(bytes, &reader).ok());
}

TEST(KvPackFile, TruncatedFileSaysWhere) {
  const std::string path = testing::make_temp_dir("kv_pack_cut") + "/t.kvpack";
  const std::string bytes = write_pack(path, make_stream());
  std::filesystem::resize_file(path, bytes.size() - 30);
  auto segment = read_kv_pack_file(path, expectation(), reader_options());
  EXPECT_EQ(segment.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(segment.status().message(), HasSubstr("truncated or malformed"));
  EXPECT_THAT(segment.status().message(), HasSubstr(path));
}

TEST(KvPackFile, GarbledPacksAreRejected) {
  const std::string path = testing::make_temp_dir("kv_pack_garble") + "/g.kvpack";
  const std::string bytes = write_pack(path, make_stream());
  auto read = [](const std::string& b, KvStreamReaderOptions options = reader_options()) {
    KvStreamReader reader(expectation(), std::move(options));
    return read_kv_pack(b, &reader).status();
  };
  std::string bad = bytes;
  bad[3] = 'X';
  EXPECT_THAT(read(bad).message(), HasSubstr("magic"));
  // A length prefix far over the cap is refused before anything is allocated.
  bad = bytes.substr(0, 8) + std::string("\xff\xff\xff\xff\x0f", 5) + bytes.substr(8);
  EXPECT_EQ(read(bad).code(), absl::StatusCode::kResourceExhausted);
  // Bytes after the trailer.
  EXPECT_THAT(read(bytes + std::string("\x00", 1)).message(), HasSubstr("bytes after its trailer"));
  // A varint that never ends.
  bad = bytes.substr(0, 8) + std::string(11, '\x80');
  EXPECT_EQ(read(bad).code(), absl::StatusCode::kDataLoss);
  // A flipped payload byte deep in the file.
  bad = bytes;
  bad[bytes.size() / 2] ^= 1;
  EXPECT_FALSE(read(bad).ok());
  // Missing file.
  EXPECT_EQ(read_kv_pack_file(path + ".missing", expectation()).status().code(), absl::StatusCode::kNotFound);
}

TEST(KvPackFile, RandomByteFlipsNeverCrashAndNeverChangeAcceptedPayloads) {
  StreamSpec spec;
  spec.token_count = 40;
  spec.max_block_payload_bytes = 16 * kF16BytesPerToken;
  const std::string path = testing::make_temp_dir("kv_pack_flip") + "/f.kvpack";
  const std::string bytes = write_pack(path, make_stream(spec));
  std::mt19937 rng(42);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bad = bytes;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
    KvStreamReader reader(expectation(spec), reader_options());
    auto segment = read_kv_pack(bad, &reader);
    if (!segment.ok()) continue;
    // Only bytes outside every digest (description, producer stats) may change.
    for (const KvStagedBlock& block : segment->blocks) {
      ASSERT_EQ(block.payload, fake_payload(block.layer, block.kind, block.token_begin, block.token_count));
    }
  }
}

}  // namespace
}  // namespace baton
