// PutPrefix and GetPrefix: prefix packs in and out of the service's
// PrefixPackStore, per tenant.
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/rpc/queued_write_reactor.h"
#include "cloud_prefill/prefill_service.h"
#include "common/kv/kv_codec_params.h"
#include "common/kv/kv_handoff.h"
#include "common/kv/kv_stream_reader.h"
#include "common/util/check.h"
#include "common/util/log.h"

namespace baton {

// One PutPrefix call: reads the uploaded stream message by message through a
// KvStreamReader (every block checked as it arrives, nothing kept unless the
// trailer verifies), then stores the pack.
class PutPrefixReactor final : public grpc::ServerReadReactor<v1::KvStreamMessage> {
 public:
  PutPrefixReactor(PrefillService* service, grpc::CallbackServerContext* context, v1::PutPrefixResponse* response)
      : service_(service), response_(response) {
    if (absl::Status serving = service_->check_serving(context); !serving.ok()) {
      Finish(to_grpc_status(serving));
      return;
    }
    absl::StatusOr<std::string> tenant = service_->options_.auth.authenticate(*context);
    if (!tenant.ok()) {
      Finish(to_grpc_status(tenant.status()));
      return;
    }
    tenant_ = *tenant;
    KvStreamExpectation expected;
    expected.model = service_->fingerprint_;
    expected.first_position = 0;
    KvStreamReaderOptions options;
    options.max_segment_tokens = static_cast<uint32_t>(service_->max_context_tokens_);
    options.max_segment_encoded_bytes = service_->options_.pack_store_bytes;
    reader_ = std::make_unique<KvStreamReader>(std::move(expected),
                                               kv_reader_options_with_codec(service_->geometry_, options));
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client finished sending
      absl::Status status = complete();
      // An upload that ends before its header or trailer is malformed input too (baton.proto, PutPrefix).
      if (absl::IsDataLoss(status)) status = absl::InvalidArgumentError(status.message());
      Finish(to_grpc_status(status));
      return;
    }
    if (absl::Status status = reader_->consume(std::move(message_)); !status.ok()) {
      // The contract (baton.proto, PutPrefix): a stream that does not verify is the caller's bad input.
      if (absl::IsDataLoss(status)) status = absl::InvalidArgumentError(status.message());
      Finish(to_grpc_status(status));
      return;
    }
    message_.Clear();
    StartRead(&message_);
  }

  void OnDone() override { delete this; }

 private:
  absl::Status complete() {
    BATON_ASSIGN_OR_RETURN(KvSegment segment, reader_->commit());
    BATON_ASSIGN_OR_RETURN(PutPackResult result, service_->store_pack(tenant_, std::move(segment)));
    response_->set_pack_id(result.pack->pack_id);
    response_->set_prefix_digest(std::string(reinterpret_cast<const char*>(result.pack->prefix_digest.data()),
                                             result.pack->prefix_digest.size()));
    response_->set_token_count(static_cast<uint32_t>(result.pack->tokens.size()));
    response_->set_stored_bytes(result.pack->stored_bytes);
    response_->set_already_present(result.already_present);
    BATON_INFO("tenant %s: pack '%s' (%zu tokens, %llu bytes)%s", tenant_.c_str(), result.pack->pack_id.c_str(),
               result.pack->tokens.size(), static_cast<unsigned long long>(result.pack->stored_bytes),
               result.already_present ? " already present" : " stored");
    return absl::OkStatus();
  }

  PrefillService* service_;
  v1::PutPrefixResponse* response_;
  std::string tenant_;
  std::unique_ptr<KvStreamReader> reader_;
  v1::KvStreamMessage message_;
};

absl::StatusOr<PutPackResult> PrefillService::store_pack(const std::string& tenant, KvSegment segment) {
  auto pack = std::make_shared<StoredPack>();
  const v1::KvHeader& header = segment.header;
  pack->tokens.assign(header.token_ids().begin(), header.token_ids().end());
  if (header.prefix_digest().size() != pack->prefix_digest.size()) {
    return absl::InvalidArgumentError("the pack header's prefix_digest is not 32 bytes");
  }
  std::copy(header.prefix_digest().begin(), header.prefix_digest().end(), pack->prefix_digest.begin());
  pack->pack_id = header.pack_id().empty() ? to_hex(pack->prefix_digest) : header.pack_id();
  // Decoded once here, so a Prefill naming the pack copies instead of decoding.
  auto kv = std::make_shared<F32KvCache>(geometry_, static_cast<int64_t>(pack->tokens.size()));
  const KvRope rope = kv_rope_of(*model_);
  BATON_RETURN_IF_ERROR(load_kv_segment(segment, &rope, *kv).status());
  pack->stored_bytes = segment.encoded_bytes + static_cast<uint64_t>(pack->tokens.size()) * geometry_.kv_dim() * 2 *
                                                   geometry_.n_layer * sizeof(float);
  pack->kv = std::move(kv);
  pack->segment = std::move(segment);
  return packs_->put(tenant, std::move(pack));
}

grpc::ServerReadReactor<v1::KvStreamMessage>* PrefillService::PutPrefix(grpc::CallbackServerContext* context,
                                                                        v1::PutPrefixResponse* response) {
  return new PutPrefixReactor(this, context, response);
}

grpc::ServerWriteReactor<v1::KvStreamMessage>* PrefillService::GetPrefix(grpc::CallbackServerContext* context,
                                                                         const v1::GetPrefixRequest* request) {
  if (absl::Status serving = check_serving(context); !serving.ok()) {
    return refused_stream(context, serving);
  }
  absl::StatusOr<std::string> tenant = options_.auth.authenticate(*context);
  if (!tenant.ok()) return refused_stream(context, tenant.status());
  if (request->has_expected_model()) {
    if (absl::Status status = check_expected_model(request->expected_model()); !status.ok()) {
      return refused_stream(context, status);
    }
  }
  std::shared_ptr<const StoredPack> pack;
  switch (request->key_case()) {
    case v1::GetPrefixRequest::kPackId:
      pack = packs_->find_by_id(*tenant, request->pack_id());
      if (pack == nullptr) {
        return refused_stream(context,
                              absl::NotFoundError(absl::StrCat("prefix pack '", request->pack_id(), "' is unknown")));
      }
      break;
    case v1::GetPrefixRequest::kPrefixDigest: {
      Digest256 digest{};
      if (request->prefix_digest().size() != digest.size()) {
        return refused_stream(context, absl::InvalidArgumentError(absl::StrFormat(
                                           "prefix_digest has %d bytes; a SHA-256 digest has 32",
                                           request->prefix_digest().size())));
      }
      std::copy(request->prefix_digest().begin(), request->prefix_digest().end(), digest.begin());
      pack = packs_->find_by_digest(*tenant, digest);
      if (pack == nullptr) {
        return refused_stream(context, absl::NotFoundError(
            absl::StrCat("no prefix pack has the prefix digest ", to_hex(digest))));
      }
      break;
    }
    default:
      return refused_stream(context, absl::InvalidArgumentError("GetPrefix needs a pack_id or a prefix_digest"));
  }
  // The stored messages go out from a sender thread: push() blocks on flow
  // control, which must not happen on a gRPC thread.
  auto* reactor = new KvStreamReactor(context, &write_stall_, "GetPrefix");
  ++pack_streams_;
  std::thread([this, reactor, pack] {
    absl::Status status;
    for (v1::KvStreamMessage& message : pack->messages()) {
      status = reactor->push(std::move(message));
      if (!status.ok()) break;
    }
    reactor->done(status);
    --pack_streams_;
  }).detach();
  return reactor;
}

}  // namespace baton
