#include "common/kv_stream/kv_fingerprint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "common/kv_stream/prefix_digest.h"
#include "common/model/model.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

ModelFingerprint fake_model(int n_head_kv = 8) {
  ModelFingerprint fp;
  fp.fields = {{"version", "1"},          {"arch", "llama"},         {"n_layer", "4"},
               {"n_embd", "256"},         {"n_head", "8"},           {"n_head_kv", std::to_string(n_head_kv)},
               {"head_dim", "32"},        {"n_ff", "512"},           {"n_vocab", "1000"},
               {"norm_eps", "9.99999975e-06"}, {"rope.type", "neox"}, {"rope.freq_base", "10000"},
               {"rope.n_rot", "32"},      {"rope.scaling", "none"},  {"rope.scaling_factor", "1"},
               {"qkv_bias", "false"},     {"tokenizer_digest", std::string(64, 'a')}};
  fp.digest = to_hex(sha256(fp.canonical()));
  return fp;
}

v1::CodecParams int8_codec() {
  v1::CodecParams codec;
  codec.set_codec(v1::KV_CODEC_INT8);
  codec.set_group_size(32);
  codec.set_key_axis(v1::KEY_AXIS_PER_CHANNEL);
  codec.set_zstd_level(3);
  return codec;
}

KvFingerprint fake_fingerprint() {
  std::vector<int32_t> tokens(100, 7);
  KvFingerprint fp;
  fp.model = fake_model();
  fp.context = {0, 100, prefix_digest(tokens)};
  fp.codec = int8_codec();
  return fp;
}

TEST(KvFingerprint, ModelFingerprintProtoRoundTripKeepsFieldsAndDigest) {
  const ModelFingerprint ours = fake_model();
  const v1::ModelFingerprint proto = model_fingerprint_to_proto(ours);
  EXPECT_EQ(proto.n_head_kv(), 8u);
  EXPECT_EQ(proto.architecture(), "llama");
  EXPECT_EQ(proto.rope().type(), v1::ROPE_TYPE_NEOX);
  EXPECT_EQ(proto.tokenizer_digest().size(), 32u);
  EXPECT_EQ(proto.digest().size(), 32u);
  auto back = model_fingerprint_from_proto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->fields, ours.fields);
  EXPECT_EQ(back->digest, ours.digest);
}

TEST(KvFingerprint, ModelFingerprintFromProtoRejectsFieldsThatDoNotMatchTheDigest) {
  v1::ModelFingerprint proto = model_fingerprint_to_proto(fake_model());
  proto.mutable_fields(3)->set_value("512");
  auto back = model_fingerprint_from_proto(proto);
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(back.status().message(), HasSubstr("does not match its fields"));
  proto.clear_fields();
  EXPECT_EQ(model_fingerprint_from_proto(proto).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvFingerprint, RealModelFingerprintSurvivesTheProto) {
  auto model = Model::Load(testing::synth_model_path("tiny", GgmlType::kF16));
  ASSERT_TRUE(model.ok()) << model.status();
  auto fp = model_fingerprint(**model);
  ASSERT_TRUE(fp.ok()) << fp.status();
  const v1::ModelFingerprint proto = model_fingerprint_to_proto(*fp);
  EXPECT_EQ(static_cast<int>(proto.n_layer()), (*model)->spec().n_layer);
  EXPECT_EQ(proto.weights_digest().size(), 32u);
  auto back = model_fingerprint_from_proto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(compare_model_fingerprints(*fp, *back, "the proto").ok());
}

TEST(KvFingerprint, HeaderRoundTripVerifies) {
  const KvFingerprint ours = fake_fingerprint();
  v1::KvHeader header;
  set_header_fingerprint(ours, &header);
  EXPECT_EQ(header.fingerprint().version(), kKvFingerprintVersion);
  EXPECT_EQ(header.prefix_digest().size(), 32u);
  auto theirs = kv_fingerprint_from_header(header);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_EQ(theirs->digest(), ours.digest());
  EXPECT_TRUE(verify_kv_fingerprint(ours, *theirs).ok());
}

TEST(KvFingerprint, VerifyNamesTheDifferingModelFieldWithBothValues) {
  KvFingerprint ours = fake_fingerprint();
  KvFingerprint theirs = fake_fingerprint();
  theirs.model = fake_model(4);
  const absl::Status status = verify_kv_fingerprint(ours, theirs);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("model fingerprint mismatch: n_head_kv is 8 here, 4 in the KV stream"));
}

TEST(KvFingerprint, VerifyNamesContextFields) {
  KvFingerprint ours = fake_fingerprint();
  KvFingerprint theirs = fake_fingerprint();
  theirs.context.first_position = 5;
  EXPECT_THAT(verify_kv_fingerprint(ours, theirs).message(),
              HasSubstr("context mismatch: first_position is 0 here, 5 in the KV stream"));
  theirs = fake_fingerprint();
  std::vector<int32_t> other(100, 8);
  theirs.context.prefix_digest = prefix_digest(other);
  const absl::Status status = verify_kv_fingerprint(ours, theirs);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("context mismatch: prefix_digest is " + to_hex(ours.context.prefix_digest) +
                                          " here, " + to_hex(theirs.context.prefix_digest)));
}

TEST(KvFingerprint, VerifyNamesCodecFields) {
  KvFingerprint ours = fake_fingerprint();
  KvFingerprint theirs = fake_fingerprint();
  theirs.codec.set_group_size(64);
  EXPECT_THAT(verify_kv_fingerprint(ours, theirs).message(),
              HasSubstr("codec mismatch: group_size is 32 here, 64 in the KV stream"));
  theirs = fake_fingerprint();
  theirs.codec.clear_zstd_level();
  EXPECT_THAT(verify_kv_fingerprint(ours, theirs).message(), HasSubstr("zstd_level is 3 here, unset"));
  theirs = fake_fingerprint();
  theirs.codec.set_codec(v1::KV_CODEC_INT4);
  EXPECT_THAT(verify_kv_fingerprint(ours, theirs).message(), HasSubstr("codec is int8 here, int4"));
}

TEST(KvFingerprint, F16IgnoresGroupSizeAndKeyAxis) {
  KvFingerprint a = fake_fingerprint();
  KvFingerprint b = fake_fingerprint();
  a.codec.set_codec(v1::KV_CODEC_F16);
  b.codec.set_codec(v1::KV_CODEC_F16);
  b.codec.set_group_size(0);
  b.codec.set_key_axis(v1::KEY_AXIS_UNSPECIFIED);
  EXPECT_EQ(a.codec_digest(), b.codec_digest());
  EXPECT_TRUE(verify_kv_fingerprint(a, b).ok());
}

TEST(KvFingerprint, EveryPartChangesTheWholeDigest) {
  const KvFingerprint base = fake_fingerprint();
  KvFingerprint changed = base;
  changed.model = fake_model(4);
  EXPECT_NE(changed.digest(), base.digest());
  changed = base;
  changed.context.token_count = 99;
  EXPECT_NE(changed.digest(), base.digest());
  changed = base;
  changed.codec.set_hadamard_keys(true);
  EXPECT_NE(changed.digest(), base.digest());
}

TEST(KvFingerprint, HeaderWhoseReadableValuesDisagreeWithItsDigestsIsRejected) {
  v1::KvHeader header;
  set_header_fingerprint(fake_fingerprint(), &header);
  v1::KvHeader tampered = header;
  tampered.set_first_position(1);
  auto fp = kv_fingerprint_from_header(tampered);
  EXPECT_EQ(fp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(fp.status().message(), HasSubstr("context_digest"));
  tampered = header;
  tampered.mutable_codec()->set_group_size(16);
  EXPECT_THAT(kv_fingerprint_from_header(tampered).status().message(), HasSubstr("codec_digest"));
  tampered = header;
  tampered.mutable_fingerprint()->set_digest(std::string(32, 'x'));
  EXPECT_THAT(kv_fingerprint_from_header(tampered).status().message(), HasSubstr("fingerprint digest"));
  tampered = header;
  tampered.set_prefix_digest("short");
  EXPECT_THAT(kv_fingerprint_from_header(tampered).status().message(), HasSubstr("prefix_digest has 5 bytes"));
  tampered = header;
  tampered.mutable_fingerprint()->set_version(2);
  EXPECT_EQ(kv_fingerprint_from_header(tampered).status().code(), absl::StatusCode::kFailedPrecondition);
  tampered = header;
  tampered.clear_fingerprint();
  EXPECT_EQ(kv_fingerprint_from_header(tampered).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton
