// PutPrefix, GetPrefix and DeletePrefix: prefix packs in and out of the
// service's PrefixPackStore, per tenant.

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/queued_write_reactor.h"
#include "common/rpc/tsan_annotations.h"
#include "cloud_prefill/prefill_service.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_stream/kv_pack_file.h"
#include "common/kv_stream/kv_stream_reader.h"
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
      finish(to_grpc_status(serving));
      return;
    }
    absl::StatusOr<std::string> tenant = service_->options_.auth.authenticate(*context);
    if (!tenant.ok()) {
      finish(to_grpc_status(tenant.status()));
      return;
    }
    tenant_ = *tenant;
    KvStreamExpectation expected;
    expected.model = service_->fingerprint_;
    expected.first_position = 0;
    KvStreamReaderOptions options = service_->pack_reader_options();
    // The bytes the header declares are reserved (store cap, tenant quota)
    // before any block is read.
    options.check_header = [this](const v1::KvHeader& header) { return reserve_for(header); };
    reader_ = std::make_unique<KvStreamReader>(std::move(expected), std::move(options));
    start_read();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client finished sending
      absl::Status status = complete();
      // An upload that ends before its header or trailer is malformed input too (baton.proto, PutPrefix).
      if (absl::IsDataLoss(status)) status = absl::InvalidArgumentError(status.message());
      finish(to_grpc_status(status));
      return;
    }
    if (message_.has_block() && header_tokens_ > 0) {  // before a header the reader refuses it
      encoded_bytes_ += message_.block().payload().size();
      if (encoded_bytes_ > encoded_allowance_) {
        finish(to_grpc_status(absl::ResourceExhaustedError(absl::StrFormat(
            "the upload's payloads passed %d bytes, more than its header's %u tokens can take (%d bytes reserved)",
            encoded_bytes_, header_tokens_, encoded_allowance_))));
        return;
      }
    }
    if (absl::Status status = reader_->consume(std::move(message_)); !status.ok()) {
      // The contract (baton.proto, PutPrefix): a stream that does not verify is the caller's bad input.
      if (absl::IsDataLoss(status)) status = absl::InvalidArgumentError(status.message());
      finish(to_grpc_status(status));
      return;
    }
    message_.Clear();
    start_read();
  }

  void OnDone() override { delete this; }

 private:
  void start_read() {
    StartRead(&message_);
  }
  void finish(const grpc::Status& status) {
    Finish(status);
  }

  // At the header: reserves the decoded KV plus the encoded stream (its raw
  // size, plus 1/32 and 4 KiB for zstd frames that did not shrink) against
  // the store's cap and the tenant's quota; the reservation is released if
  // the upload fails.
  absl::Status reserve_for(const v1::KvHeader& header) {
    BATON_ASSIGN_OR_RETURN(const uint64_t raw_bytes, kv_header_raw_bytes(header, service_->geometry_));
    header_tokens_ = header.token_count();
    encoded_allowance_ = raw_bytes + raw_bytes / 32 + 4096;
    const uint64_t bytes = service_->decoded_pack_bytes(header.token_count()) + encoded_allowance_;
    BATON_ASSIGN_OR_RETURN(reservation_, service_->pack_library_->reserve(tenant_, bytes));
    return absl::OkStatus();
  }

  absl::Status complete() {
    BATON_ASSIGN_OR_RETURN(KvSegment segment, reader_->commit());
    BATON_ASSIGN_OR_RETURN(PutPackResult result, service_->store_pack(tenant_, std::move(segment), &reservation_));
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
  PrefixPackStore::Reservation reservation_;  // from the header on
  uint32_t header_tokens_ = 0;
  uint64_t encoded_allowance_ = 0;            // payload bytes the reservation covers
  uint64_t encoded_bytes_ = 0;                // payload bytes received
};

// One GetPrefix call: writes the stored pack's messages straight from the
// immutable pack (no copy, no thread), one write in flight at a time, paced
// by flow control. Holds one of max_pack_calls slots until OnDone.
class PackStreamReactor final : public grpc::ServerWriteReactor<v1::KvStreamMessage> {
 public:
  // `watchdog` (optional) puts the download under the write-progress
  // deadline: a client that stops reading loses the call and its slot.
  PackStreamReactor(grpc::CallbackServerContext* context, WriteStallWatchdog* watchdog, std::atomic<uint32_t>* calls,
                    std::shared_ptr<const StoredPack> pack)
      : calls_(calls), pack_(std::move(pack)) {
    if (watchdog != nullptr) {
      watch_ = watchdog->watch(absl::StrCat("GetPrefix from ", context->peer()), [context] { context->TryCancel(); });
    }
    start_write();
  }

  void OnWriteDone(bool ok) override {
    if (watch_ != nullptr) watch_->write_done();
    if (!ok) {  // the client went away, stopped reading past the deadline, or the stream broke
      finish(grpc::Status(grpc::StatusCode::CANCELLED, "GetPrefix: the stream ended before the pack was sent"));
      return;
    }
    if (++next_ == pack_->messages.size()) {
      finish(grpc::Status::OK);
      return;
    }
    start_write();
  }

  void OnDone() override {
    if (watch_ != nullptr) watch_->close();  // no TryCancel of this call runs elsewhere after this
    --*calls_;
    delete this;
  }

 private:
  void start_write() {
    if (watch_ != nullptr) watch_->write_started();
    const v1::KvStreamMessage* message = &pack_->messages[next_];
    StartWrite(message);
  }
  void finish(const grpc::Status& status) {
    if (watch_ != nullptr) watch_->write_started();  // the status may stall behind unread data too
    Finish(status);
  }

  std::atomic<uint32_t>* calls_;
  std::shared_ptr<const StoredPack> pack_;
  size_t next_ = 0;  // the message being written
  std::shared_ptr<WriteStallWatchdog::Watch> watch_;  // null: no write-progress deadline
};

uint64_t PrefillService::decoded_pack_bytes(uint64_t tokens) const {
  return tokens * static_cast<uint64_t>(geometry_.kv_dim()) * 2 * static_cast<uint64_t>(geometry_.n_layer) *
         sizeof(float);
}

KvStreamReaderOptions PrefillService::pack_reader_options() const {
  KvStreamReaderOptions options;
  options.max_segment_tokens = static_cast<uint32_t>(max_context_tokens_);
  options.max_segment_encoded_bytes = options_.pack_store_bytes;
  return kv_reader_options_with_codec(geometry_, options);
}

absl::StatusOr<std::shared_ptr<StoredPack>> PrefillService::make_stored_pack(KvSegment segment) const {
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
  pack->encoded_bytes = segment.encoded_bytes;
  pack->stored_bytes = segment.encoded_bytes + decoded_pack_bytes(pack->tokens.size());
  pack->kv = std::move(kv);
  pack->messages = kv_stream_messages(std::move(segment));
  return pack;
}

absl::StatusOr<std::shared_ptr<StoredPack>> PrefillService::decode_stored_pack(std::string_view value) const {
  KvStreamExpectation expected;
  expected.model = fingerprint_;
  expected.first_position = 0;
  KvStreamReader reader(std::move(expected), pack_reader_options());
  BATON_ASSIGN_OR_RETURN(KvSegment segment, read_kv_pack(value, &reader));
  return make_stored_pack(std::move(segment));
}

absl::StatusOr<PutPackResult> PrefillService::store_pack(const std::string& tenant, KvSegment segment,
                                                         PrefixPackStore::Reservation* reservation) {
  BATON_ASSIGN_OR_RETURN(std::shared_ptr<StoredPack> pack, make_stored_pack(std::move(segment)));
  return pack_library_->put(tenant, std::move(pack), reservation);
}

grpc::ServerReadReactor<v1::KvStreamMessage>* PrefillService::PutPrefix(grpc::CallbackServerContext* context,
                                                                        v1::PutPrefixResponse* response) {
  const TsanServiceEdges::Handler tsan_handler(tsan_edges_);  // the first statement: see TsanServiceEdges
  return new PutPrefixReactor(this, context, response);
}

grpc::ServerWriteReactor<v1::KvStreamMessage>* PrefillService::GetPrefix(grpc::CallbackServerContext* context,
                                                                         const v1::GetPrefixRequest* request) {
  const TsanServiceEdges::Handler tsan_handler(tsan_edges_);  // the first statement: see TsanServiceEdges
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
    case v1::GetPrefixRequest::kPackId: {
      absl::StatusOr<std::shared_ptr<const StoredPack>> found = pack_library_->find_by_id(*tenant, request->pack_id());
      if (!found.ok()) return refused_stream(context, found.status());
      pack = std::move(*found);
      if (pack == nullptr) {
        return refused_stream(context,
                              absl::NotFoundError(absl::StrCat("prefix pack '", request->pack_id(), "' is unknown")));
      }
      break;
    }
    case v1::GetPrefixRequest::kPrefixDigest: {
      Digest256 digest{};
      if (request->prefix_digest().size() != digest.size()) {
        return refused_stream(context, absl::InvalidArgumentError(absl::StrFormat(
                                           "prefix_digest has %d bytes; a SHA-256 digest has 32",
                                           request->prefix_digest().size())));
      }
      std::copy(request->prefix_digest().begin(), request->prefix_digest().end(), digest.begin());
      absl::StatusOr<std::shared_ptr<const StoredPack>> found = pack_library_->find_by_digest(*tenant, digest);
      if (!found.ok()) return refused_stream(context, found.status());
      pack = std::move(*found);
      if (pack == nullptr) {
        return refused_stream(context, absl::NotFoundError(
            absl::StrCat("no prefix pack has the prefix digest ", to_hex(digest))));
      }
      break;
    }
    default:
      return refused_stream(context, absl::InvalidArgumentError("GetPrefix needs a pack_id or a prefix_digest"));
  }
  // A bounded number of pack downloads at once: each holds a stream's
  // flow-control window and a slot until its client has read it all.
  if (++pack_streams_ > static_cast<uint32_t>(std::max(1, options_.max_pack_calls))) {
    --pack_streams_;
    add_retry_after(*context, options_.retry_after_ms);
    return refused_stream(context, absl::ResourceExhaustedError(absl::StrFormat(
                                       "%d GetPrefix calls are running, the most this server allows "
                                       "(--max-pack-calls); retry after %u ms",
                                       options_.max_pack_calls, options_.retry_after_ms)));
  }
  return new PackStreamReactor(context, &write_stall_, &pack_streams_, std::move(pack));
}

grpc::ServerUnaryReactor* PrefillService::DeletePrefix(grpc::CallbackServerContext* context,
                                                       const v1::DeletePrefixRequest* request,
                                                       v1::DeletePrefixResponse* response) {
  const TsanServiceEdges::Handler tsan_handler(tsan_edges_);  // the first statement: see TsanServiceEdges
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<RemovedPack> removed = delete_prefix(*context, *request);
  if (removed.ok()) {
    response->set_pack_id(removed->pack_id);
    response->set_freed_bytes(removed->freed_bytes);
  }
  reactor->Finish(to_grpc_status(removed.status()));
  return reactor;
}

absl::StatusOr<RemovedPack> PrefillService::delete_prefix(grpc::CallbackServerContext& context,
                                                          const v1::DeletePrefixRequest& request) {
  BATON_RETURN_IF_ERROR(check_serving(&context));
  BATON_ASSIGN_OR_RETURN(const std::string tenant, options_.auth.authenticate(context));
  absl::StatusOr<RemovedPack> removed;
  switch (request.key_case()) {
    case v1::DeletePrefixRequest::kPackId:
      removed = pack_library_->remove(tenant, request.pack_id());
      break;
    case v1::DeletePrefixRequest::kPrefixDigest: {
      Digest256 digest{};
      if (request.prefix_digest().size() != digest.size()) {
        return absl::InvalidArgumentError(absl::StrFormat("prefix_digest has %d bytes; a SHA-256 digest has 32",
                                                          request.prefix_digest().size()));
      }
      std::copy(request.prefix_digest().begin(), request.prefix_digest().end(), digest.begin());
      removed = pack_library_->remove_by_digest(tenant, digest);
      break;
    }
    default:
      return absl::InvalidArgumentError("DeletePrefix needs a pack_id or a prefix_digest");
  }
  if (removed.ok()) {
    BATON_INFO("tenant %s: pack '%s' deleted (%llu bytes freed)", tenant.c_str(), removed->pack_id.c_str(),
               static_cast<unsigned long long>(removed->freed_bytes));
  }
  return removed;
}

}  // namespace baton
