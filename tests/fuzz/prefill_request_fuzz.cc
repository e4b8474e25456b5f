// libFuzzer target: arbitrary bytes -> the cloud prefill service's request
// handling (Prefill, PutPrefix, GetPrefix, DeletePrefix, bearer-token
// tenants, per-tenant pack quotas), through a
// real PrefillServer on 127.0.0.1:0 in this process serving a tiny synthetic
// model, called through a stub with short deadlines: the exact code the gRPC
// handlers run (PrefillService, PutPrefixReactor, prefill_job, TenantAuth).
//
// Input: one options byte, then records [tag: 1 byte][length: 2 bytes LE]
// [payload: length bytes], each payload one serialized message parsed with
// ParseFromArray (so mutations inside a payload keep its framing):
//   tag >= 200    v1::DeletePrefixRequest         -> one DeletePrefix call
//   else tag % 4 == 0  v1::PrefillRequest         -> one Prefill call
//        tag % 4 == 1  v1::KvStreamMessage        -> appended to the current PutPrefix upload
//        tag % 4 == 2  v1::GetPrefixRequest       -> one GetPrefix call
//        tag % 4 == 3  raw authorization header   -> TenantAuth::tenant_of_header
// (DeletePrefix came later: tags below 200 keep the meaning older corpus
// inputs were found with.)
// A PutPrefix upload is sent when a record of another tag (or the end)
// follows its messages. Options byte: bits 0-1 pick the caller's credentials
// (tenant "alpha", tenant "beta", none, a wrong token); bit 2 makes every
// Prefill and GetPrefix name the served model in expected_model.
//
// Invariants (abort on violation): no crash, UB or leak; every refusal is a
// non-OK status with a non-empty message and a code the rpc documents
// (proto/baton.proto); an accepted Prefill or GetPrefix stream verifies with
// KvStreamReader (the model's codec hooks) and covers the tokens asked for;
// a refused PutPrefix stores nothing (its pack id and prefix digest stay
// unknown to GetPrefix unless an earlier upload stored them); the packs a
// tenant holds never pass its quota; DeletePrefix succeeds exactly for a
// pack the caller's tenant stored, after which GetPrefix no longer finds it,
// while the other tenant's pack of the same id is still served; a refused
// DeletePrefix changes nothing.
//
// Per-input cost is bounded: the server accepts at most kMaxContextTokens
// tokens, at most kMaxCalls calls and kMaxUploadMessages messages per upload.
//
//   tests/fuzz/build.sh services && tests/fuzz/run.sh prefill_request 600
//   BATON_FUZZ_WRITE_SEEDS=DIR build-fuzz/prefill_request_fuzz   (writes the seed corpus, exits)
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_format.h"
#include "cloud_prefill/prefill_server.h"
#include "cloud_prefill/prefill_service.h"
#include "cloud_prefill/tenant_auth.h"
#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/engine/sampling_proto.h"
#include "common/kv_stream/kv_stream_reader.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/model/model_synth.h"
#include "common/model/synth_shapes.h"
#include "common/util/log.h"
#include "proto/baton.grpc.pb.h"
#include "tests/fuzz/service_fuzz_common.h"

namespace {

using baton::fuzz::check_refusal;
using baton::fuzz::die_unless_ok;
using baton::fuzz::record;
using baton::fuzz::require;
using baton::fuzz::seed_prompt;
using baton::fuzz::trace;
using baton::fuzz::write_seed;

constexpr int64_t kMaxContextTokens = 64;  // the server's prompt cap: bounds every job
constexpr int kMaxCalls = 8;               // RPCs per input
constexpr int kMaxUploadMessages = 64;     // messages per PutPrefix upload
constexpr int kDeadlineSeconds = 20;       // per call; a hang shows as DEADLINE_EXCEEDED -> abort
constexpr char kAlphaToken[] = "alpha-token-0123456789";
constexpr char kBetaToken[] = "beta-token-0123456789";
constexpr uint8_t kDeleteTag = 200;  // tags from here on: DeletePrefix records
constexpr uint64_t kPackQuotaBytes = uint64_t{1} << 20;  // per tenant: a few tiny packs, then RESOURCE_EXHAUSTED

struct Harness {
  std::string dir;
  std::unique_ptr<baton::Model> model;
  baton::ModelFingerprint fingerprint;
  baton::KvGeometry geometry;
  baton::TenantAuth auth;
  std::unique_ptr<baton::PrefillService> service;
  std::unique_ptr<baton::PrefillServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<baton::v1::Prefill::Stub> stub;
  // (tenant, pack id) of the packs stored by accepted uploads (and not
  // deleted since) -> their hex prefix digest and stored bytes.
  struct Stored {
    std::string digest;
    uint64_t bytes = 0;
  };
  std::map<std::pair<std::string, std::string>, Stored> stored;

  bool has_id(const std::string& tenant, const std::string& id) const { return stored.count({tenant, id}) > 0; }
  bool has_digest(const std::string& tenant, const std::string& digest) const {
    for (const auto& [key, pack] : stored) {
      if (key.first == tenant && pack.digest == digest) return true;
    }
    return false;
  }
  uint64_t tenant_bytes(const std::string& tenant) const {
    uint64_t bytes = 0;
    for (const auto& [key, pack] : stored) bytes += key.first == tenant ? pack.bytes : 0;
    return bytes;
  }
};

Harness* harness = nullptr;

std::string hex(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) out += absl::StrFormat("%02x", c);
  return out;
}

// --- seeds -------------------------------------------------------------------

// A valid pack of `tokens` (f16, first_position 0) as its stream messages.
std::vector<baton::v1::KvStreamMessage> seed_pack(const std::vector<int32_t>& tokens, const std::string& pack_id) {
  baton::Engine engine(*harness->model, baton::EngineOptions{.n_threads = 1});
  baton::F32KvCache cache(harness->geometry, kMaxContextTokens);
  die_unless_ok(engine.prefill(tokens, cache, nullptr), "seed prefill");
  baton::KvStreamHeaderInfo info;
  info.model = harness->fingerprint;
  info.codec = baton::default_kv_codec_config(baton::KvCodecConfig::Bits::kF16, harness->geometry);
  info.first_position = 0;
  info.token_ids = tokens;
  info.prefix_digest = baton::prefix_digest(tokens);
  info.pack_id = pack_id;
  std::vector<baton::v1::KvStreamMessage> messages;
  baton::KvStreamWriter writer([&](const baton::v1::KvStreamMessage& m) {
    messages.push_back(m);
    return absl::OkStatus();
  });
  const baton::KvRope rope = baton::kv_rope_of(*harness->model);
  die_unless_ok(baton::write_kv_segment(cache, info, &rope, writer), "seed pack");
  return messages;
}

void write_seeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  namespace v1 = baton::v1;
  const v1::ModelFingerprint served = baton::model_fingerprint_to_proto(harness->fingerprint);
  auto prefill = [](const std::vector<int32_t>& tokens) {
    v1::PrefillRequest request;
    for (int32_t id : tokens) request.mutable_tokens()->add_ids(static_cast<uint32_t>(id));
    return request;
  };
  {
    v1::PrefillRequest request = prefill(seed_prompt(12, 1));
    write_seed(dir, "prefill_tokens", std::string(1, '\0') + record(0, request.SerializeAsString()));
    request.set_first_position(5);
    request.set_chunk_tokens(3);
    request.mutable_codec()->set_codec(v1::KV_CODEC_INT4);
    request.set_session_id("0123456789abcdef0123456789abcdef");  // >= 32 characters: accepted
    *request.mutable_expected_model() = served;
    write_seed(dir, "prefill_int4_session", std::string(1, '\1') + record(0, request.SerializeAsString()) +
                                                record(0, request.SerializeAsString()));
  }
  {  // Early tokens: seeded sampling with the edge's sampler state.
    v1::PrefillRequest request = prefill(seed_prompt(10, 2));
    baton::SamplingParams params;
    params.temperature = 0.8f;
    params.top_k = 5;
    params.seed = 3;
    baton::Sampler sampler(params);
    for (int32_t id : seed_prompt(10, 2)) sampler.accept(id);
    *request.mutable_early_tokens() = baton::early_tokens_request(sampler, 3, seed_prompt(1, 4).front(), 2u);
    write_seed(dir, "prefill_early_tokens", std::string(1, '\0') + record(0, request.SerializeAsString()));
  }
  {
    v1::PrefillRequest request;
    request.set_text("In the beginning was the word");
    request.mutable_codec()->set_codec(v1::KV_CODEC_INT8);
    request.mutable_codec()->set_pre_rope_keys(true);
    write_seed(dir, "prefill_text_int8_pre", std::string(1, '\4') + record(0, request.SerializeAsString()));
  }
  {  // An upload, a Prefill naming it, and both GetPrefix keys.
    const std::vector<int32_t> system = seed_prompt(8, 6);
    std::string bytes(1, '\0');
    for (const v1::KvStreamMessage& message : seed_pack(system, "sys-1")) {
      bytes += record(1, message.SerializeAsString());
    }
    std::vector<int32_t> longer = system;
    for (int32_t id : seed_prompt(4, 9)) longer.push_back(id);
    v1::PrefillRequest request = prefill(longer);
    request.set_prefix_pack_id("sys-1");
    bytes += record(0, request.SerializeAsString());
    v1::GetPrefixRequest by_id;
    by_id.set_pack_id("sys-1");
    bytes += record(2, by_id.SerializeAsString());
    v1::GetPrefixRequest by_digest;
    const baton::Digest256 digest = baton::prefix_digest(system);
    by_digest.set_prefix_digest(std::string(reinterpret_cast<const char*>(digest.data()), digest.size()));
    bytes += record(2, by_digest.SerializeAsString());
    write_seed(dir, "put_prefill_get", bytes);
  }
  {  // An upload cut before its trailer, and one by another tenant.
    const std::vector<v1::KvStreamMessage> pack = seed_pack(seed_prompt(4, 3), "");
    std::string bytes(1, '\1');
    for (size_t i = 0; i + 1 < pack.size(); ++i) bytes += record(1, pack[i].SerializeAsString());
    write_seed(dir, "put_truncated", bytes);
  }
  {  // Two tenants upload the same id; alpha deletes it by id, beta by digest, alpha again (NOT_FOUND).
    const std::vector<int32_t> system = seed_prompt(6, 4);
    std::string bytes(1, '\0');
    for (const v1::KvStreamMessage& message : seed_pack(system, "shared")) bytes += record(1, message.SerializeAsString());
    v1::DeletePrefixRequest by_id;
    by_id.set_pack_id("shared");
    bytes += record(kDeleteTag, by_id.SerializeAsString());
    bytes += record(kDeleteTag, by_id.SerializeAsString());
    write_seed(dir, "put_delete", bytes);
    std::string beta(1, '\1');
    for (const v1::KvStreamMessage& message : seed_pack(system, "shared")) beta += record(1, message.SerializeAsString());
    v1::DeletePrefixRequest by_digest;
    const baton::Digest256 digest = baton::prefix_digest(system);
    by_digest.set_prefix_digest(std::string(reinterpret_cast<const char*>(digest.data()), digest.size()));
    beta += record(kDeleteTag, by_digest.SerializeAsString());
    write_seed(dir, "put_delete_by_digest", beta);
  }
  write_seed(dir, "auth_header", std::string(1, '\2') + record(3, std::string("Bearer ") + kBetaToken) +
                                     record(3, "Bearer nope"));
  std::fprintf(stderr, "prefill_request_fuzz: wrote seeds to %s\n", dir.c_str());
}

// --- calls -------------------------------------------------------------------

void set_up_context(grpc::ClientContext& context, int credentials) {
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(kDeadlineSeconds));
  switch (credentials) {
    case 0: context.AddMetadata("authorization", std::string("Bearer ") + kAlphaToken); break;
    case 1: context.AddMetadata("authorization", std::string("Bearer ") + kBetaToken); break;
    case 2: break;
    default: context.AddMetadata("authorization", "Bearer not-a-known-token-at-all"); break;
  }
}

const char* tenant_of(int credentials) { return credentials == 0 ? "alpha" : credentials == 1 ? "beta" : ""; }

// An accepted stream must verify and cover [first_position, end).
void verify_stream(const std::vector<baton::v1::KvStreamMessage>& messages, std::optional<uint32_t> first_position,
                   std::optional<std::vector<int32_t>> token_ids, const char* rpc) {
  baton::KvStreamExpectation expected;
  expected.model = harness->fingerprint;
  expected.first_position = first_position;
  expected.token_ids = token_ids;
  baton::KvStreamReader reader(expected, baton::kv_reader_options_with_codec(harness->geometry));
  for (const baton::v1::KvStreamMessage& message : messages) {
    absl::Status status = reader.consume(message);
    require(status.ok(), absl::StrFormat("%s: an accepted stream does not verify: %s", rpc, status.ToString()));
  }
  absl::StatusOr<baton::KvSegment> segment = reader.commit();
  require(segment.ok(), absl::StrFormat("%s: an accepted stream does not commit: %s", rpc,
                                        segment.status().ToString()));
  if (token_ids.has_value()) {
    require(segment->header.token_count() == token_ids->size(), absl::StrFormat("%s: token count", rpc));
  }
}

void call_prefill(baton::v1::PrefillRequest request, int credentials, bool name_model) {
  namespace v1 = baton::v1;
  if (name_model) *request.mutable_expected_model() = baton::model_fingerprint_to_proto(harness->fingerprint);
  grpc::ClientContext context;
  set_up_context(context, credentials);
  std::unique_ptr<grpc::ClientReader<v1::KvStreamMessage>> reader = harness->stub->Prefill(&context, request);
  std::vector<v1::KvStreamMessage> messages;
  v1::KvStreamMessage message;
  while (reader->Read(&message)) messages.push_back(message);
  const grpc::Status status = reader->Finish();
  trace("Prefill", status);
  if (!status.ok()) {
    check_refusal(status, "Prefill",
                  {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::FAILED_PRECONDITION,
                   grpc::StatusCode::NOT_FOUND, grpc::StatusCode::RESOURCE_EXHAUSTED,
                   grpc::StatusCode::UNAUTHENTICATED});
    return;
  }
  require(credentials < 2, "Prefill accepted without a valid token");
  // Early tokens (PrefillRequest.early_tokens): only when asked for, never
  // first, before the trailer, no more than asked, inside the vocabulary;
  // the rest is the KV stream.
  const uint32_t early_asked = request.has_early_tokens() ? request.early_tokens().count() : 0;
  uint32_t early_seen = 0;
  std::vector<v1::KvStreamMessage> kv;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].has_early_tokens()) {
      kv.push_back(messages[i]);
      continue;
    }
    require(i > 0 && i + 1 < messages.size(), "Prefill: early tokens before the header or after the trailer");
    for (uint32_t id : messages[i].early_tokens().token_ids()) {
      require(id < static_cast<uint32_t>(harness->model->spec().n_vocab), "Prefill: an early token outside the vocabulary");
      ++early_seen;
    }
  }
  require(early_seen <= early_asked, absl::StrFormat("Prefill: %u early tokens, %u asked for", early_seen, early_asked));
  messages = std::move(kv);
  std::optional<std::vector<int32_t>> ids;
  if (request.has_tokens()) {
    ids.emplace(request.tokens().ids().begin() + request.first_position(), request.tokens().ids().end());
  }
  verify_stream(messages, request.first_position(), ids, "Prefill");
}

// GetPrefix; true when it found the pack.
bool call_get_prefix(baton::v1::GetPrefixRequest request, int credentials, bool name_model) {
  namespace v1 = baton::v1;
  if (name_model) *request.mutable_expected_model() = baton::model_fingerprint_to_proto(harness->fingerprint);
  grpc::ClientContext context;
  set_up_context(context, credentials);
  std::unique_ptr<grpc::ClientReader<v1::KvStreamMessage>> reader = harness->stub->GetPrefix(&context, request);
  std::vector<v1::KvStreamMessage> messages;
  v1::KvStreamMessage message;
  while (reader->Read(&message)) messages.push_back(message);
  const grpc::Status status = reader->Finish();
  trace("GetPrefix", status);
  if (!status.ok()) {
    check_refusal(status, "GetPrefix",
                  {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::FAILED_PRECONDITION,
                   grpc::StatusCode::NOT_FOUND, grpc::StatusCode::RESOURCE_EXHAUSTED,
                   grpc::StatusCode::UNAUTHENTICATED});
    return false;
  }
  require(credentials < 2, "GetPrefix accepted without a valid token");
  verify_stream(messages, 0u, std::nullopt, "GetPrefix");
  return true;
}

void call_put_prefix(const std::vector<baton::v1::KvStreamMessage>& upload, int credentials) {
  namespace v1 = baton::v1;
  grpc::ClientContext context;
  set_up_context(context, credentials);
  v1::PutPrefixResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::KvStreamMessage>> writer = harness->stub->PutPrefix(&context, &response);
  for (const v1::KvStreamMessage& message : upload) {
    if (!writer->Write(message)) break;  // the server finished early (a refusal)
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  trace("PutPrefix", status);
  const std::string tenant = tenant_of(credentials);
  if (status.ok()) {
    require(credentials < 2, "PutPrefix accepted without a valid token");
    require(!response.pack_id().empty() && response.prefix_digest().size() == 32, "PutPrefix response filled");
    const bool known = harness->has_id(tenant, response.pack_id());
    require(known == response.already_present(), "PutPrefix already_present says whether the tenant held the pack");
    harness->stored.emplace(std::make_pair(tenant, response.pack_id()),
                            Harness::Stored{hex(response.prefix_digest()), response.stored_bytes()});
    require(harness->tenant_bytes(tenant) <= kPackQuotaBytes,
            absl::StrFormat("tenant %s holds %d pack bytes, over its quota of %d", tenant,
                            harness->tenant_bytes(tenant), kPackQuotaBytes));
    return;
  }
  check_refusal(status, "PutPrefix",
                {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::FAILED_PRECONDITION,
                 grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::ALREADY_EXISTS,
                 grpc::StatusCode::UNAUTHENTICATED});
  // Nothing stored: the header's pack id and digest are still unknown
  // (unless an earlier upload stored them).
  if (credentials >= 2 || upload.empty() || !upload.front().has_header()) return;
  const v1::KvHeader& header = upload.front().header();
  if (!header.pack_id().empty() && header.pack_id().size() <= 128 &&
      !harness->has_id(tenant, header.pack_id())) {
    v1::GetPrefixRequest by_id;
    by_id.set_pack_id(header.pack_id());
    require(!call_get_prefix(by_id, credentials, false), "a refused PutPrefix stored its pack id");
  }
  if (header.prefix_digest().size() == 32 && !harness->has_digest(tenant, hex(header.prefix_digest()))) {
    v1::GetPrefixRequest by_digest;
    by_digest.set_prefix_digest(header.prefix_digest());
    require(!call_get_prefix(by_digest, credentials, false), "a refused PutPrefix stored its prefix digest");
  }
}

// GetPrefix by id as `credentials`: whether it found the pack.
bool pack_found(const std::string& pack_id, int credentials) {
  baton::v1::GetPrefixRequest by_id;
  by_id.set_pack_id(pack_id);
  return call_get_prefix(by_id, credentials, false);
}

void call_delete_prefix(const baton::v1::DeletePrefixRequest& request, int credentials) {
  namespace v1 = baton::v1;
  grpc::ClientContext context;
  set_up_context(context, credentials);
  v1::DeletePrefixResponse response;
  const grpc::Status status = harness->stub->DeletePrefix(&context, request, &response);
  trace("DeletePrefix", status);
  const std::string tenant = tenant_of(credentials);
  const int other = credentials == 0 ? 1 : 0;
  const std::string other_tenant = tenant_of(other);
  const bool by_id = request.key_case() == v1::DeletePrefixRequest::kPackId;
  const bool by_digest = request.key_case() == v1::DeletePrefixRequest::kPrefixDigest;
  const bool held = credentials < 2 && ((by_id && harness->has_id(tenant, request.pack_id())) ||
                                        (by_digest && harness->has_digest(tenant, hex(request.prefix_digest()))));
  if (!status.ok()) {
    check_refusal(status, "DeletePrefix",
                  {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::NOT_FOUND,
                   grpc::StatusCode::UNAUTHENTICATED});
    require(!held, "DeletePrefix refused a pack the caller's tenant holds");
    // A refused call changes nothing: a pack of that id the tenant holds is still there.
    if (by_id && credentials < 2 && harness->has_id(tenant, request.pack_id())) {
      require(pack_found(request.pack_id(), credentials), "a refused DeletePrefix deleted the pack");
    }
    return;
  }
  require(credentials < 2, "DeletePrefix accepted without a valid token");
  require(held, "DeletePrefix deleted a pack the caller's tenant does not hold");
  const auto key = std::make_pair(tenant, response.pack_id());
  auto it = harness->stored.find(key);
  require(it != harness->stored.end(), "DeletePrefix names a pack the tenant stored");
  require(!by_digest || it->second.digest == hex(request.prefix_digest()), "DeletePrefix by digest: the digest");
  require(response.freed_bytes() == it->second.bytes, "DeletePrefix freed the bytes PutPrefix stored");
  harness->stored.erase(it);
  require(!pack_found(response.pack_id(), credentials), "a deleted pack is still served");
  // A tenant never deletes another's pack.
  if (harness->has_id(other_tenant, response.pack_id())) {
    require(pack_found(response.pack_id(), other), "DeletePrefix deleted the other tenant's pack of that id");
  }
}

void check_auth_header(const std::string& value) {
  absl::StatusOr<std::string> tenant = harness->auth.tenant_of_header(value);
  if (tenant.ok()) {
    require(*tenant == "alpha" || *tenant == "beta", "tenant_of_header names a configured tenant");
    require(value == std::string("Bearer ") + kAlphaToken || value == std::string("Bearer ") + kBetaToken,
            "tenant_of_header accepts only the configured tokens");
  } else {
    require(absl::IsUnauthenticated(tenant.status()) && !tenant.status().message().empty(),
            "a refused authorization header is UNAUTHENTICATED with a message");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  baton::fuzz::g_target = "prefill_request_fuzz";
  // Protobuf logs every invalid UTF-8 string it refuses; the refusal is already an error.
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  baton::set_log_level(baton::LogLevel::kError);
  harness = new Harness;
  char pattern[] = "/tmp/baton-prefill-fuzz-XXXXXX";
  require(mkdtemp(pattern) != nullptr, "mkdtemp");
  harness->dir = pattern;
  const std::string model_path = harness->dir + "/tiny-f32.gguf";
  die_unless_ok(baton::synthesize_model(*baton::find_synth_shape("tiny"), baton::SynthOptions{baton::GgmlType::kF32, 1, 1},
                                        model_path),
                "synthesize the tiny model");
  absl::StatusOr<std::unique_ptr<baton::Model>> model = baton::Model::Load(model_path);
  die_unless_ok(model.status(), "load the model");
  harness->model = std::move(*model);
  absl::StatusOr<baton::ModelFingerprint> fingerprint = baton::model_fingerprint(*harness->model);
  die_unless_ok(fingerprint.status(), "fingerprint");
  harness->fingerprint = *fingerprint;
  const baton::ModelSpec& spec = harness->model->spec();
  harness->geometry = baton::KvGeometry{spec.n_layer, spec.n_head, spec.n_head_kv, spec.head_dim, {}};
  if (const char* seeds = std::getenv("BATON_FUZZ_WRITE_SEEDS")) {
    write_seeds(seeds);
    std::filesystem::remove_all(harness->dir);
    std::exit(0);
  }

  absl::StatusOr<baton::TenantAuth> auth = baton::TenantAuth::FromText(
      absl::StrFormat("%s alpha\n%s beta\n", kAlphaToken, kBetaToken), "fuzz tokens");
  die_unless_ok(auth.status(), "tokens");
  harness->auth = *auth;
  baton::PrefillServiceOptions options;
  options.threads = 1;
  options.max_running = 1;
  options.max_queued = 4;
  options.max_context_tokens = kMaxContextTokens;
  options.chunk_tokens = 16;
  options.prefix_cache_bytes = uint64_t{8} << 20;
  options.session_cache_bytes = uint64_t{8} << 20;
  options.pack_store_bytes = uint64_t{64} << 20;
  options.pack_quota_bytes = kPackQuotaBytes;
  options.auth = harness->auth;
  harness->service = std::make_unique<baton::PrefillService>(options);
  die_unless_ok(harness->service->Load(model_path), "load the service");
  absl::StatusOr<std::unique_ptr<baton::PrefillServer>> server =
      baton::PrefillServer::Start("127.0.0.1:0", *harness->service);
  die_unless_ok(server.status(), "start the server");
  harness->server = std::move(*server);
  harness->channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(harness->server->port()),
                                         grpc::InsecureChannelCredentials());
  harness->stub = baton::v1::Prefill::NewStub(harness->channel);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace v1 = baton::v1;
  if (size == 0) return 0;
  const int credentials = data[0] & 3;
  const bool name_model = (data[0] & 4) != 0;
  size_t at = 1;
  int calls = 0;
  bool sent_without_prompt = false;
  std::vector<v1::KvStreamMessage> upload;
  auto flush_upload = [&] {
    if (upload.empty()) return;
    call_put_prefix(upload, credentials);
    upload.clear();
    ++calls;
  };
  while (at < size && calls < kMaxCalls) {
    const uint8_t tag = data[at] >= kDeleteTag ? 4 : data[at] % 4;
    size_t length = at + 2 < size ? size_t{data[at + 1]} | (size_t{data[at + 2]} << 8) : 0;
    at = std::min(size, at + 3);
    length = std::min(length, size - at);
    const uint8_t* payload = data + at;
    at += length;
    if (tag != 1) flush_upload();
    switch (tag) {
      case 0: {
        v1::PrefillRequest request;
        if (!request.ParseFromArray(payload, static_cast<int>(length))) continue;
        // A request without a prompt is refused at once: one per input checks that.
        if (request.input_case() == v1::PrefillRequest::INPUT_NOT_SET && sent_without_prompt) continue;
        sent_without_prompt |= request.input_case() == v1::PrefillRequest::INPUT_NOT_SET;
        call_prefill(std::move(request), credentials, name_model);
        ++calls;
        break;
      }
      case 1: {
        v1::KvStreamMessage message;
        if (!message.ParseFromArray(payload, static_cast<int>(length))) continue;
        if (upload.size() < static_cast<size_t>(kMaxUploadMessages)) upload.push_back(std::move(message));
        break;
      }
      case 2: {
        v1::GetPrefixRequest request;
        if (!request.ParseFromArray(payload, static_cast<int>(length))) continue;
        call_get_prefix(std::move(request), credentials, name_model);
        ++calls;
        break;
      }
      case 3:
        check_auth_header(std::string(reinterpret_cast<const char*>(payload), length));
        break;
      default: {
        v1::DeletePrefixRequest request;
        if (!request.ParseFromArray(payload, static_cast<int>(length))) continue;
        call_delete_prefix(request, credentials);
        ++calls;
        break;
      }
    }
  }
  if (calls < kMaxCalls) flush_upload();
  return 0;
}
