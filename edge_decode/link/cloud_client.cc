#include "edge_decode/link/cloud_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/kv_stream/kv_calibration_check.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/rpc/channel_options.h"
#include "common/rpc/grpc_status.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/util/check.h"
#include "common/util/clock.h"
#include "common/util/log.h"
#include "common/util/sha256.h"
#include "edge_decode/link/stream_watchdog.h"

namespace baton {

// Wire bytes from which a KV stream measures the link's bandwidth; shorter
// streams measure the fixed cost of a call instead.
constexpr uint64_t kMinBandwidthSampleBytes = uint64_t{64} << 10;

namespace {

using Clock = std::chrono::steady_clock;

std::string hex_of(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) absl::StrAppendFormat(&out, "%02x", c);
  return out;
}

}  // namespace

CloudKvStream::~CloudKvStream() {
  if (reader_ != nullptr && !finished_) {
    context_.TryCancel();
    v1::KvStreamMessage ignored;
    while (reader_->Read(&ignored)) {
    }
    reader_->Finish().ok();
  }
}

KvMessageSource CloudKvStream::source() {
  return [this]() -> absl::StatusOr<std::optional<v1::KvStreamMessage>> {
    if (finished_) return std::optional<v1::KvStreamMessage>();
    v1::KvStreamMessage message;
    if (reader_->Read(&message)) return std::optional<v1::KvStreamMessage>(std::move(message));
    finished_ = true;
    grpc::Status status = reader_->Finish();
    if (!status.ok()) return from_grpc_status(status, "cloud: ");
    return std::optional<v1::KvStreamMessage>();
  };
}

std::string prefix_affinity_key(std::span<const int32_t> tokens, const std::string& pack_id) {
  if (!pack_id.empty()) return pack_id;
  return to_hex(prefix_digest(tokens.first(std::min<size_t>(tokens.size(), kPrefixDigestBlockTokens))));
}

absl::StatusOr<std::unique_ptr<CloudClient>> CloudClient::Create(CloudClientOptions options) {
  absl::StatusOr<CloudSessionKeys> keys = options.session_secret_path.empty()
                                              ? CloudSessionKeys::Ephemeral()
                                              : CloudSessionKeys::Persistent(options.session_secret_path);
  if (!keys.ok()) return keys.status();
  std::unique_ptr<CloudClient> client(new CloudClient(std::move(options), std::move(*keys)));
  const CloudClientOptions& o = client->options_;
  ChannelSecurityOptions security_options;
  security_options.ca_path = o.ca_path;
  security_options.cert_path = o.cert_path;
  security_options.key_path = o.key_path;
  security_options.token_path = o.token_path;
  BATON_ASSIGN_OR_RETURN(ChannelSecurity security, make_channel_security(security_options));
  client->bearer_token_ = security.bearer_token;
  ChannelTuning tuning;
  tuning.max_receive_bytes = 8 << 20;  // KV blocks stay under 4 MiB; leave slack
  tuning.fast_reconnect = true;        // a cloud that restarts, or starts after the agent
  client->channel_ = open_channel(client->options_.address, security.credentials, tuning);
  client->stub_ = v1::Prefill::NewStub(client->channel_);
  client->credentials_ = security.credentials;
  client->tuning_ = tuning;
  client->link_.address = client->options_.address;
  return client;
}

CloudClient::~CloudClient() { stop_health_polling(); }

int early_tokens_window_bytes(double bandwidth_bytes_per_s, double rtt_ms) {
  if (!(bandwidth_bytes_per_s > 0) || !(rtt_ms > 0)) return 0;
  constexpr int kMin = 64 << 10;
  constexpr int kMax = 4 << 20;
  const double wanted = 2.0 * bandwidth_bytes_per_s * rtt_ms / 1000.0;
  int window = kMin;
  while (window < kMax && window < wanted) window *= 2;
  return window;
}

v1::Prefill::Stub* CloudClient::paced_stub(int window_bytes) {
  std::lock_guard<std::mutex> lock(paced_mu_);
  PacedChannel& paced = paced_[window_bytes];
  if (paced.stub == nullptr) {
    ChannelTuning tuning = tuning_;
    tuning.stream_window_bytes = window_bytes;
    paced.channel = open_channel(options_.address, credentials_, tuning);
    paced.stub = v1::Prefill::NewStub(paced.channel);
  }
  return paced.stub.get();
}

void CloudClient::prepare(grpc::ClientContext& context, std::chrono::system_clock::time_point deadline) const {
  prepare_call(context, deadline, bearer_token_);
}

void CloudClient::start_health_polling() {
  std::lock_guard<std::mutex> lock(mu_);
  if (polling_) return;
  polling_ = true;
  poller_ = std::thread([this] { poll_loop(); });
}

void CloudClient::stop_health_polling() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!polling_) return;
    polling_ = false;
  }
  poll_cv_.notify_all();
  if (poller_.joinable()) poller_.join();
}

void CloudClient::poll_loop() {
  while (true) {
    check_health().IgnoreError();  // the outcome lands in link_
    std::unique_lock<std::mutex> lock(mu_);
    poll_cv_.wait_for(lock, options_.health_interval, [this] { return !polling_; });
    if (!polling_) return;
  }
}

absl::Status CloudClient::check_health() {
  grpc::ClientContext context;
  prepare(context, std::chrono::system_clock::now() + options_.health_timeout);
  v1::HealthResponse response;
  const Clock::time_point start = Clock::now();
  grpc::Status status = stub_->Health(&context, v1::HealthRequest(), &response);
  const double rtt_ms = ms_between(start, Clock::now());
  std::lock_guard<std::mutex> lock(mu_);
  link_.checked_unix_ms = unix_ms_now();
  if (!status.ok()) {
    link_.reachable = false;
    link_.state = v1::SERVING_STATE_UNSPECIFIED;
    link_.last_error = absl::StrCat("Health: ", status.error_message());
    return from_grpc_status(status, "cloud Health: ");
  }
  rtt_ms_.add(rtt_ms);
  link_.reachable = true;
  link_.last_error.clear();
  link_.state = response.state();
  link_.last_rtt_ms = rtt_ms;
  link_.prefill_tokens_per_s = response.prefill_tokens_per_s();
  link_.model_digest = hex_of(response.model().digest());
  return absl::OkStatus();
}

void CloudClient::record_served() {
  std::lock_guard<std::mutex> lock(mu_);
  link_.reachable = true;
  link_.state = v1::SERVING_STATE_READY;  // it just served a call
  link_.last_error.clear();
  link_.checked_unix_ms = unix_ms_now();
}

CloudLinkStatus CloudClient::link() const {
  std::lock_guard<std::mutex> lock(mu_);
  CloudLinkStatus link = link_;
  link.rtt_ms = rtt_ms_.value();
  link.bandwidth_bytes_per_s = bandwidth_.value();
  link.wire_bytes_per_quantized_byte = wire_ratio_.value();
  link.call_overhead_ms = call_overhead_ms_.value();
  return link;
}

void CloudClient::record_call_overhead(const CloudPrefillResult& result) {
  const v1::ProducerStats& producer = result.producer;
  const double compute_ms = producer.queue_ms() + producer.prefill_ms() + producer.encode_ms();
  if (compute_ms <= 0) return;  // no producer figures: compute and overhead cannot be told apart
  // Only short streams measure it: in a long one the fixed part hides in the
  // transfer time, which is also what the bandwidth estimate is made of
  // (record_transfer takes the long ones), so it would come out near 0.
  if (result.wire_bytes >= kMinBandwidthSampleBytes) return;
  const double bandwidth = bandwidth_.value();
  const double link_ms = bandwidth > 0 ? static_cast<double>(result.wire_bytes) / bandwidth * 1000.0 : 0.0;
  call_overhead_ms_.add(std::max(0.0, result.total_ms - compute_ms - link_ms));
}

void CloudClient::record_transfer(uint64_t wire_bytes, uint64_t quantized_bytes, double seconds) {
  if (quantized_bytes > 0) wire_ratio_.add(static_cast<double>(wire_bytes) / static_cast<double>(quantized_bytes));
  // Short transfers say more about latency than about bandwidth.
  if (wire_bytes >= kMinBandwidthSampleBytes && seconds >= 0.001) bandwidth_.add(static_cast<double>(wire_bytes) / seconds);
}

absl::StatusOr<CloudPrefillResult> CloudClient::prefill(const CloudPrefillRequest& request,
                                                        const ModelFingerprint& model, const KvRope& rope,
                                                        KvCache& target, const CloudProgressFn& progress,
                                                        const CancelledFn& cancelled, CancelSlot* cancel_slot) {
  if (request.first_position >= request.tokens.size()) {
    return absl::InvalidArgumentError(absl::StrFormat("cloud prefill of [%d, %d) is empty", request.first_position,
                                                      request.tokens.size()));
  }
  v1::PrefillRequest rpc;
  for (int32_t token : request.tokens) rpc.mutable_tokens()->add_ids(static_cast<uint32_t>(token));
  *rpc.mutable_expected_model() = model_fingerprint_to_proto(model);
  BATON_ASSIGN_OR_RETURN(const v1::CodecParams wanted_codec, kv_codec_params(request.codec));
  *rpc.mutable_codec() = wanted_codec;
  // In a request an unset key_group_size means "the server's default", not
  // "group_size" as in a header: say it.
  if (request.codec.quantized() && !request.codec.transform && rpc.codec().key_group_size() == 0) {
    rpc.mutable_codec()->set_key_group_size(rpc.codec().group_size());
  }
  rpc.set_first_position(request.first_position);
  if (!request.session_id.empty()) {
    rpc.set_session_id(session_keys_.key_for(request.session_id, request.session_created_unix_ms));
  }
  rpc.set_prefix_pack_id(request.prefix_pack_id);
  rpc.set_cache_salt(request.cache_salt);
  const uint32_t early_wanted = request.early.has_value() ? request.early->count() : 0;
  if (early_wanted > 0) *rpc.mutable_early_tokens() = *request.early;

  grpc::ClientContext context;
  prepare(context, std::min(request.deadline, std::chrono::system_clock::now() + options_.prefill_timeout));
  context.AddMetadata(kPrefixDigestMetadataKey, prefix_affinity_key(request.tokens, request.prefix_pack_id));
  // With early tokens, a window of about two bandwidth-delay products: the
  // cloud then cannot run more KV ahead of them than the link holds.
  v1::Prefill::Stub* stub = stub_.get();
  int stream_window = 0;
  if (early_wanted > 0) {
    const CloudLinkStatus now = link();
    stream_window = early_tokens_window_bytes(now.bandwidth_bytes_per_s, now.rtt_ms);
    if (stream_window > 0) stub = paced_stub(stream_window);
  }
  const Clock::time_point start = Clock::now();
  std::unique_ptr<grpc::ClientReader<v1::KvStreamMessage>> reader = stub->Prefill(&context, rpc);
  // Disarmed on every way out, before `context` goes away.
  struct Disarm {
    CancelSlot* slot;
    ~Disarm() {
      if (slot != nullptr) slot->disarm();
    }
  } disarm{cancel_slot};
  if (cancel_slot != nullptr) cancel_slot->arm([&context] { context.TryCancel(); });

  const uint32_t n_layer = static_cast<uint32_t>(target.geometry().n_layer);
  // The watchdog counts token-layer-kind units: a whole stream is K and V of
  // every layer for every new position.
  StreamWatchdogLimits watch;
  watch.stall_timeout = options_.stall_timeout;
  watch.local_prefill_ms = request.give_up_after_local_ms;
  const uint64_t new_tokens = request.tokens.size() > request.first_position
                                  ? request.tokens.size() - request.first_position
                                  : 0;
  StreamWatchdog watchdog(watch, uint64_t{2} * n_layer * new_tokens, [&context] { context.TryCancel(); });
  CloudPrefillResult result;
  CloudPrefillProgress seen;
  seen.n_layer = n_layer;
  Clock::time_point first_block_time{};
  Clock::time_point last_message_time = start;
  bool finished = false;
  bool have_first_block = false;
  // Early tokens: shown only once the header verified, which the reader
  // did when it asks for the message after the header.
  bool header_returned = false;
  bool header_verified = false;
  std::vector<v1::EarlyTokens> early_waiting;
  uint32_t early_seen = 0;
  bool early_last_seen = false;  // a message marked `last` arrived: no more may follow
  bool trailer_seen = false;
  auto hand_over = [&](const v1::EarlyTokens& early) {
    result.early_tokens += static_cast<uint32_t>(early.token_ids_size());
    if (request.on_early) request.on_early(early);
  };
  auto take_early = [&](v1::EarlyTokens early) -> absl::Status {
    if (trailer_seen) return absl::DataLossError("the cloud sent early tokens after the KV stream's trailer");
    if (early_last_seen) {
      return absl::DataLossError("the cloud sent early tokens after the message it marked last");
    }
    early_last_seen = early.last();
    early_seen += static_cast<uint32_t>(early.token_ids_size());
    if (early_wanted == 0 || early_seen > early_wanted) {
      return absl::DataLossError(absl::StrFormat(
          "the cloud sent %u early tokens; %u were asked for", early_seen, early_wanted));
    }
    if (early.logprobs_size() != 0 && early.logprobs_size() != early.token_ids_size()) {
      return absl::DataLossError(absl::StrFormat("the cloud's early tokens carry %d logprobs for %d tokens",
                                                 early.logprobs_size(), early.token_ids_size()));
    }
    if (!header_verified) {
      early_waiting.push_back(std::move(early));
      return absl::OkStatus();
    }
    hand_over(early);
    return absl::OkStatus();
  };
  // The caller's client may have left: the call ends at once.
  auto stop_if_cancelled = [&]() -> absl::Status {
    if (!cancelled || !cancelled()) return absl::OkStatus();
    context.TryCancel();
    return absl::CancelledError("the Generate call was cancelled during the cloud prefill");
  };
  KvMessageSource source = [&]() -> absl::StatusOr<std::optional<v1::KvStreamMessage>> {
    if (finished) return std::optional<v1::KvStreamMessage>();
    if (header_returned && !header_verified) {
      header_verified = true;
      for (const v1::EarlyTokens& early : early_waiting) hand_over(early);
      early_waiting.clear();
    }
    BATON_RETURN_IF_ERROR(stop_if_cancelled());
    v1::KvStreamMessage message;
    bool read = reader->Read(&message);
    while (read && message.has_early_tokens()) {
      last_message_time = Clock::now();
      watchdog.on_message(0);
      BATON_RETURN_IF_ERROR(take_early(std::move(*message.mutable_early_tokens())));
      BATON_RETURN_IF_ERROR(stop_if_cancelled());
      read = reader->Read(&message);
    }
    if (!read) {
      finished = true;
      last_message_time = Clock::now();
      watchdog.stop();  // all arrived: waiting in before_commit is no stall
      grpc::Status status = reader->Finish();
      if (!status.ok()) return from_grpc_status(status, "cloud: ");
      return std::optional<v1::KvStreamMessage>();
    }
    last_message_time = Clock::now();
    watchdog.on_message(message.has_block() ? message.block().token_count() : 0);
    if (message.has_block()) {
      const v1::KvBlock& block = message.block();
      seen.first_block = !have_first_block;
      if (!have_first_block) {
        have_first_block = true;
        first_block_time = last_message_time;
      }
      seen.kv_bytes_received += block.encoded_size();
      seen.kv_layers_received = std::max(seen.kv_layers_received, std::min(block.layer(), n_layer));
      result.wire_bytes += block.encoded_size();
      result.quantized_bytes += block.raw_size();
      if (progress) progress(seen);
    } else if (message.has_header()) {
      header_returned = true;
    } else if (message.has_trailer()) {
      trailer_seen = true;
      if (message.trailer().has_producer()) result.producer = message.trailer().producer();
      seen.kv_layers_received = n_layer;
      seen.first_block = false;
      seen.trailer = true;
      if (progress) progress(seen);
    }
    return std::optional<v1::KvStreamMessage>(std::move(message));
  };

  KvStreamExpectation expected;
  expected.model = model;
  expected.first_position = request.first_position;
  expected.token_ids = std::vector<int32_t>(request.tokens.begin() + request.first_position, request.tokens.end());
  KvReadOptions read_options;
  read_options.transform = request.transform;
  Clock::time_point wait_start{}, wait_end{};
  if (request.before_commit) {
    read_options.before_load = [&]() -> absl::Status {
      wait_start = Clock::now();
      absl::Status ready = request.before_commit();
      wait_end = Clock::now();
      return ready;
    };
  }
  if (request.max_staging_bytes > 0) {
    read_options.reader.check_header = [&request, &target](const v1::KvHeader& header) -> absl::Status {
      const uint64_t staging = kv_stream_staging_bytes(header, target);
      if (staging <= request.max_staging_bytes) return absl::OkStatus();
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the cloud's KV stream declares %u tokens: staging them takes %u bytes, but only %u bytes of the KV "
          "memory budget are free",
          header.token_count(), staging, request.max_staging_bytes));
    };
  }
  // The codec we asked for and the prefix we hold: a stream of another codec
  // or for another history (a delta on a prefix we do not have) is refused.
  expected.codec = wanted_codec;
  expected.prefix_digest = prefix_digest(request.tokens);
  absl::StatusOr<KvSegmentLoad> load = read_kv_segment(source, expected, &rope, target, read_options);
  watchdog.stop();
  if (!finished) {
    // The reader stopped early (a bad message): end the call instead of draining it.
    context.TryCancel();
    v1::KvStreamMessage ignored;
    while (reader->Read(&ignored)) {
    }
    reader->Finish().ok();
  }
  if (!load.ok()) {
    if (std::optional<std::string> why = watchdog.fired()) return absl::DeadlineExceededError(*why);
    if (absl::IsDeadlineExceeded(load.status())) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "the cloud prefill did not finish within its deadline (%.1f s: --cloud-timeout or the request's own) "
          "with %.0f%% of the KV received",
          ms_between(start, Clock::now()) / 1000, watchdog.received_fraction() * 100));
    }
    return load.status();
  }
  const Clock::time_point end = Clock::now();
  record_served();

  result.load = *load;
  result.stream_window_bytes = stream_window;
  result.commit_wait_ms = ms_between(wait_start, wait_end);
  result.total_ms = ms_between(start, end) - result.commit_wait_ms;
  const double receive_ms = ms_between(start, last_message_time);
  result.first_block_ms = have_first_block ? ms_between(start, first_block_time) : receive_ms;
  const v1::ProducerStats& producer = result.producer;
  const double compute_ms = producer.queue_ms() + producer.prefill_ms() + producer.encode_ms();
  result.cloud_prefill_ms = std::min(receive_ms, compute_ms > 0 ? compute_ms : result.first_block_ms);
  result.transfer_ms = std::max(0.0, receive_ms - result.cloud_prefill_ms);
  result.ingest_ms = std::max(0.0, result.total_ms - receive_ms);
  // The link estimate is what the split policy models: wire bytes over the
  // receive time not hidden behind cloud compute.
  if (have_first_block) record_transfer(result.wire_bytes, result.quantized_bytes, result.transfer_ms / 1000.0);
  record_call_overhead(result);
  return result;
}

uint64_t kv_stream_staging_bytes(const v1::KvHeader& header, const KvCache& target) {
  const KvGeometry& g = target.geometry();
  const auto* store = dynamic_cast<const QuantizedKvCache*>(&target);
  const uint64_t f32_per_token = static_cast<uint64_t>(g.kv_dim()) * 2 * g.n_layer * sizeof(float);
  // A transform stream is decoded as it arrives: to the store's form when the
  // store is INT8, else to f32 rows that wait for the trailer.
  const bool transform_rows = header.codec().codec() == v1::KV_CODEC_TC && store != nullptr &&
                              (store->config().bits_for(true) != KvCodecConfig::Bits::kInt8 ||
                               store->config().bits_for(false) != KvCodecConfig::Bits::kInt8);
  const uint64_t per_token =
      store != nullptr && !transform_rows ? static_cast<uint64_t>(store->bytes_per_token()) : f32_per_token;
  return uint64_t{header.token_count()} * per_token;
}

absl::StatusOr<std::shared_ptr<const KvCalibration>> CloudClient::fetch_kv_calibration(const std::string& model_digest,
                                                                                       const KvGeometry& geometry,
                                                                                       uint64_t max_bytes) {
  grpc::ClientContext context;
  prepare(context, std::chrono::system_clock::now() + options_.prefill_timeout);
  std::unique_ptr<grpc::ClientReader<v1::KvCalibrationChunk>> reader =
      stub_->GetKvCalibration(&context, v1::GetKvCalibrationRequest());
  // Ends the call instead of draining it when we stop early.
  struct Cancel {
    grpc::ClientContext& context;
    bool finished = false;
    ~Cancel() {
      if (!finished) context.TryCancel();
    }
  } cancel{context};
  v1::KvCalibrationChunk chunk;
  std::string bytes;
  uint64_t declared = 0;
  std::string declared_sha256, declared_model;
  bool first = true;
  while (reader->Read(&chunk)) {
    if (first) {
      declared = chunk.total_bytes();
      declared_sha256 = chunk.sha256();
      declared_model = chunk.model_digest();
      if (declared == 0 || declared > max_bytes) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "the cloud's KV calibration declares %u bytes; this edge accepts 1..%u", declared, max_bytes));
      }
      if (declared_model != model_digest) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "the cloud's KV calibration is of model %s, this edge's model is %s", declared_model, model_digest));
      }
      bytes.reserve(static_cast<size_t>(declared));
      first = false;
    }
    if (chunk.data().size() > declared - bytes.size()) {
      return absl::DataLossError(
          absl::StrFormat("the cloud's KV calibration stream passes the %u bytes it declared", declared));
    }
    bytes += chunk.data();
  }
  cancel.finished = true;
  grpc::Status status = reader->Finish();
  if (!status.ok()) return from_grpc_status(status, "cloud GetKvCalibration: ");
  if (first || bytes.size() != declared) {
    return absl::DataLossError(absl::StrFormat("the cloud's KV calibration stream ended at %u of %u bytes",
                                               bytes.size(), declared));
  }
  const Digest256 digest = sha256(bytes);
  if (declared_sha256 != std::string(reinterpret_cast<const char*>(digest.data()), digest.size())) {
    return absl::DataLossError("the cloud's KV calibration does not match the SHA-256 it declared");
  }
  absl::StatusOr<KvCalibration> parsed = parse_kv_calibration(bytes);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the cloud's KV calibration: ", parsed.status().message()));
  }
  BATON_RETURN_IF_ERROR(check_kv_calibration_model(*parsed, model_digest, geometry, "the cloud's KV calibration"));
  record_served();
  return std::make_shared<const KvCalibration>(std::move(*parsed));
}

std::unique_ptr<CloudKvStream> CloudClient::get_prefix(const std::string& pack_id, const ModelFingerprint& model) {
  std::unique_ptr<CloudKvStream> stream(new CloudKvStream());
  prepare(stream->context_, std::chrono::system_clock::now() + options_.prefill_timeout);
  stream->context_.AddMetadata(kPrefixDigestMetadataKey, prefix_affinity_key({}, pack_id));
  v1::GetPrefixRequest request;
  request.set_pack_id(pack_id);
  *request.mutable_expected_model() = model_fingerprint_to_proto(model);
  stream->reader_ = stub_->GetPrefix(&stream->context_, request);
  return stream;
}

}  // namespace baton
