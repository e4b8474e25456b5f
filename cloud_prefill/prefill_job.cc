#include "cloud_prefill/prefill_job.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/model/model.h"
#include "common/util/check.h"
#include "common/util/clock.h"
#include "common/util/log.h"
#include "common/tokenizer/tokenizer.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

// Encodes and sends the stream's blocks off the compute thread. The compute
// thread submits (layer, token range) tasks whose rows are final in the host
// cache (it never writes them again). `threads` workers take tasks in order
// and encode each one's blocks with a writer of their own that holds the
// same header, so they cut the blocks exactly as the stream's writer would;
// the sender thread passes each task's blocks to the stream's writer (which
// checksums, counts and sends them) in submission order, so the stream is
// the same bytes with any number of workers. Workers run at most
// kLookAhead tasks per worker ahead of the sender (a slow client holds that
// much encoded KV, not the whole stream). The stream's writer belongs to the
// sender between the header and drain().
class StreamEncoder {
 public:
  struct Task {
    int layer = 0;
    uint32_t begin = 0;
    uint32_t count = 0;
  };

  StreamEncoder(const F32KvCache& cache, const KvCodecConfig& codec, const KvTransformCodec* transform,
                const KvRope& rope, KvStreamWriter& writer, const v1::KvHeader& header, int threads)
      : cache_(cache),
        codec_(codec),
        transform_(transform),
        rope_(rope),
        writer_(writer),
        header_(header),
        look_ahead_(kLookAhead * static_cast<uint64_t>(std::max(1, threads))) {
    sender_ = std::thread([this] { send_loop(); });
    for (int i = 0; i < std::max(1, threads); ++i) workers_.emplace_back([this] { encode_loop(); });
  }

  ~StreamEncoder() { stop(/*discard=*/true); }

  void submit(const Task& task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(task);
      ++submitted_;
    }
    work_cv_.notify_one();
  }

  // Sticky: the first encode / send error (a cancelled client shows here).
  absl::Status status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

  // Waits until every submitted task is sent; then the writer belongs to the
  // caller again.
  absl::Status drain() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [this] { return sent_ == submitted_ || !status_.ok(); });
    return status_;
  }

  // Ends the threads. `discard` drops what is not sent yet (the job failed);
  // else everything submitted is sent first.
  void stop(bool discard = false) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      if (discard) {
        discarding_ = true;
        tasks_.clear();
        encoded_.clear();
      }
    }
    work_cv_.notify_all();
    send_cv_.notify_all();
    for (std::thread& worker : workers_) worker.join();
    sender_.join();
  }

  // When the first block went to the sink; nullopt before.
  std::optional<Clock::time_point> first_block_time() const {
    std::lock_guard<std::mutex> lock(mu_);
    return first_block_;
  }

 private:
  static constexpr uint64_t kLookAhead = 2;  // tasks per worker encoded ahead of the sender

  void encode_loop() {
    const KvGeometry& g = cache_.geometry();
    // Rows straight from the host cache: the positions are final even though
    // the cache has not committed (set_size) the chunk yet.
    const KvRowsFn rows = [this, &g](int layer, bool is_key, int64_t begin, int64_t n, float* out) {
      const float* src = is_key ? cache_.k_row(layer, begin) : cache_.v_row(layer, begin);
      std::memcpy(out, src, static_cast<size_t>(n * g.kv_dim()) * sizeof(float));
      return absl::OkStatus();
    };
    // This worker's writer: the stream's header, blocks kept here.
    std::vector<v1::KvStreamMessage> blocks;
    KvStreamWriter shadow([&blocks](const v1::KvStreamMessage& m) {
      if (m.has_block()) blocks.push_back(m);
      return absl::OkStatus();
    });
    absl::Status ready = shadow.write_header(header_);
    for (;;) {
      Task task;
      uint64_t seq = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] {
          return discarding_ || !status_.ok() || (stopping_ && tasks_.empty()) ||
                 (!tasks_.empty() && taken_ < sent_ + look_ahead_);
        });
        if (discarding_ || !status_.ok() || tasks_.empty()) return;
        task = tasks_.front();
        tasks_.pop_front();
        seq = taken_++;
      }
      blocks.clear();
      absl::Status status = ready;
      if (status.ok()) {
        status = write_kv_layer_range(rows, g, codec_, &rope_, task.layer, task.begin, task.count, shadow,
                                      transform_);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!status.ok()) {
          if (status_.ok()) status_ = status;
        } else if (!discarding_) {
          encoded_.emplace(seq, std::move(blocks));
        }
      }
      send_cv_.notify_one();
      if (!status.ok()) {
        work_cv_.notify_all();
        idle_cv_.notify_all();
      }
    }
  }

  void send_loop() {
    for (;;) {
      std::vector<v1::KvStreamMessage> blocks;
      {
        std::unique_lock<std::mutex> lock(mu_);
        send_cv_.wait(lock, [this] {
          return discarding_ || !status_.ok() || encoded_.count(sent_) > 0 || (stopping_ && sent_ == submitted_);
        });
        const auto it = encoded_.find(sent_);
        if (discarding_ || !status_.ok() || it == encoded_.end()) return;
        blocks = std::move(it->second);
        encoded_.erase(it);
      }
      absl::Status status;
      for (v1::KvStreamMessage& m : blocks) {
        v1::KvBlock& b = *m.mutable_block();
        status = writer_.write_block(b.layer(), b.kind(), b.token_begin(), b.token_count(),
                                     std::move(*b.mutable_payload()), b.raw_size());
        if (!status.ok()) break;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!status.ok()) {
          if (status_.ok()) status_ = status;
        } else {
          if (!first_block_.has_value() && !blocks.empty()) first_block_ = Clock::now();
          ++sent_;
        }
      }
      work_cv_.notify_all();  // room to encode ahead again
      idle_cv_.notify_all();
    }
  }

  const F32KvCache& cache_;
  const KvCodecConfig& codec_;
  const KvTransformCodec* transform_;  // null unless codec_ is a transform codec
  const KvRope& rope_;
  KvStreamWriter& writer_;
  const v1::KvHeader header_;  // the stream's, for the workers' writers
  const uint64_t look_ahead_;  // tasks taken but not sent, at most
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // a task came, a task was sent, or stopping
  std::condition_variable send_cv_;  // a task was encoded, or stopping
  std::condition_variable idle_cv_;  // a task was sent, or an error
  std::deque<Task> tasks_;           // not taken yet; guarded by mu_
  std::map<uint64_t, std::vector<v1::KvStreamMessage>> encoded_;  // by submission number; guarded by mu_
  uint64_t submitted_ = 0, taken_ = 0, sent_ = 0;                 // guarded by mu_
  bool stopping_ = false;            // guarded by mu_
  bool discarding_ = false;          // guarded by mu_
  absl::Status status_;              // guarded by mu_
  std::optional<Clock::time_point> first_block_;  // guarded by mu_
  std::vector<std::thread> workers_;
  std::thread sender_;
};

// Copies rows [0, n) of every layer of `source` into the empty `target`.
void copy_prefix(const F32KvCache& source, int64_t n, F32KvCache& target) {
  for (int layer = 0; layer < target.geometry().n_layer; ++layer) {
    const absl::Status stored = target.store(layer, 0, n, source.k_row(layer, 0), source.v_row(layer, 0));
    BATON_CHECK(stored.ok(), "copying reused KV into the request cache failed");
  }
  target.set_size(n);
}

// What step 1 found.
struct HeldKv {
  int64_t reused = 0;          // positions copied into the request cache
  bool exact = true;           // false: built on a prefix pack's decoded (quantized) KV
  bool session_owned = false;  // the request extended its session's stored history (L1 or L2)
};

// Copies `candidate` [0, n) into `cache` when it beats what `held` has.
void take_if_longer(const F32KvCache& candidate, int64_t n, bool exact, F32KvCache& cache, HeldKv& held) {
  if (n <= held.reused) return;
  cache.set_size(0);
  copy_prefix(candidate, n, cache);
  held.reused = n;
  held.exact = exact;
}

// Step 1: the longest KV held for the prompt — its pack, its session (L1,
// else L2), or its leading blocks (L1, then L2 from where L1 stopped) — goes
// into `cache` (empty, capacity = the prompt).
HeldKv reuse_held_kv(const PrefillJobInput& input, const PrefillJobEnv& env, const std::string& partition,
                     F32KvCache& cache) {
  const KvGeometry& geometry = cache.geometry();
  const int64_t end = static_cast<int64_t>(input.tokens.size());
  const std::span<const int32_t> tokens(input.tokens);
  StateTier* tier = env.state_tier != nullptr && env.state_tier->enabled() ? env.state_tier : nullptr;
  HeldKv held;
  if (input.pack != nullptr) {
    held.reused = static_cast<int64_t>(input.pack->tokens.size());
    held.exact = false;  // quantized pack KV underneath
    copy_prefix(*input.pack->kv, held.reused, cache);
  }
  if (!input.session_id.empty() && (env.session_cache != nullptr || tier != nullptr)) {
    F32KvCache candidate(geometry, end);
    bool session_exact = true;
    int64_t from_session = env.session_cache != nullptr
                               ? env.session_cache->load(input.tenant, input.session_id, tokens, end, candidate,
                                                         &session_exact)
                               : 0;
    if (from_session == 0 && tier != nullptr) {
      from_session = tier->load_session(input.tenant, input.session_id, tokens, end, candidate, &session_exact);
    }
    held.session_owned = from_session > 0;
    take_if_longer(candidate, from_session, session_exact, cache, held);
  }
  const int64_t full_blocks_end = end / kPrefixDigestBlockTokens * kPrefixDigestBlockTokens;
  if ((env.prefix_cache != nullptr || tier != nullptr) && held.reused < full_blocks_end) {
    F32KvCache candidate(geometry, end);
    int64_t from_prefix =
        env.prefix_cache != nullptr ? env.prefix_cache->load_longest(partition, tokens, end, candidate) : 0;
    // L2 only where it could beat what is held: the blocks L1 did not have.
    if (tier != nullptr && std::max(from_prefix, held.reused) < full_blocks_end) {
      from_prefix = tier->load_prefix_blocks(partition, tokens, end, candidate);
    }
    take_if_longer(candidate, from_prefix, /*exact=*/true, cache, held);
  }
  return held;
}

// Step 4: the prompt's exact full blocks go to the prefix cache (and those
// this job computed to L2); the whole KV to the session cache (and L2,
// replacing the stored state only when the request owned it).
void keep_for_later(const PrefillJobInput& input, const PrefillJobEnv& env, const std::string& partition,
                    const HeldKv& held, std::shared_ptr<F32KvCache> cache) {
  const std::span<const int32_t> tokens(input.tokens);
  StateTier* tier = env.state_tier != nullptr && env.state_tier->enabled() ? env.state_tier : nullptr;
  // Only exact KV goes into the prefix caches: with a pack underneath, every
  // position depends on the pack's decoded (quantized) KV, which a request
  // without the pack must not be handed.
  if (held.exact) {
    if (env.prefix_cache != nullptr) env.prefix_cache->insert(partition, tokens, *cache);
    if (tier != nullptr) tier->store_prefix_blocks(partition, tokens, cache, held.reused / kPrefixDigestBlockTokens);
  }
  if (input.session_id.empty()) return;
  if (tier != nullptr) {
    tier->store_session(input.tenant, input.session_id, input.tokens, cache, held.exact,
                        /*replace=*/held.session_owned);
  }
  if (env.session_cache != nullptr) {
    env.session_cache->store(input.tenant, input.session_id, input.tokens, std::move(cache), held.exact);
  }
}

// Step 3b: samples the reply's first tokens after the prompt with the
// edge's sampler and sends each at once. The decode steps write rows
// [end, end + count) of the cache (its capacity has room), which are dropped
// afterwards: the KV stream and the caches hold the prompt only. A failed
// step ends the sampling (the last message says so), not the KV stream; a
// failed send (the client went away) is returned.
absl::Status sample_early_tokens(const EarlySampling& early, const PrefillJobEnv& env, PrefillBackend& backend,
                                 F32KvCache& cache, const KvMessageSink& send, Clock::time_point job_start,
                                 PrefillJobResult& result, const std::function<bool()>& cancelled) {
  const int64_t end = cache.size();
  Sampler sampler(early.params);
  sampler.restore(early.state);
  std::vector<float> logits;
  int32_t token = early.last_token;
  absl::Status sent;
  for (uint32_t i = 0; i < early.count; ++i) {
    if (cancelled && cancelled()) break;
    v1::KvStreamMessage message;
    v1::EarlyTokens* out = message.mutable_early_tokens();
    absl::Status step = backend.decode(std::span<const int32_t>(&token, 1), cache, &logits);
    if (!step.ok()) {
      BATON_WARN("early tokens: decode step %u failed: %s", i, std::string(step.message()).c_str());
      out->set_last(true);
      out->set_cloud_ms(ms_between(job_start, Clock::now()));
      sent = send(message);
      break;
    }
    const int32_t next = sampler.sample(logits);
    sampler.accept(next, /*generated=*/true);
    out->add_token_ids(static_cast<uint32_t>(next));
    if (early.logprobs.has_value()) fill_token_logprob(logits, next, *early.logprobs, out->add_logprobs());
    const bool eog = env.tokenizer != nullptr && env.tokenizer->is_eog(next);
    out->set_last(eog || i + 1 == early.count);
    out->set_cloud_ms(ms_between(job_start, Clock::now()));
    sent = send(message);
    if (!sent.ok()) break;
    ++result.early_tokens;
    if (eog) break;
    token = next;
  }
  cache.set_size(end);
  return sent;
}

}  // namespace

absl::StatusOr<PrefillJobResult> run_prefill_job(const PrefillJobInput& input, const PrefillJobEnv& env,
                                                 PrefillBackend& backend, const KvMessageSink& sink,
                                                 const std::function<bool()>& cancelled, const KvMessageSink& urgent) {
  const Clock::time_point job_start = Clock::now();
  PrefillJobResult result;
  result.queue_ms = ms_between(input.admitted, job_start);
  const Model& model = *env.model;
  const ModelSpec& spec = model.spec();
  const KvGeometry geometry = kv_geometry_for(spec);
  const int64_t end = static_cast<int64_t>(input.tokens.size());
  const int64_t first = input.first_position;
  BATON_CHECK(first < end);

  // 1. Reuse what is held. The cache is shared so the session cache can keep it.
  // Early tokens' decode steps write past the prompt: room for them.
  const int64_t early_rows = input.early.has_value() ? input.early->count : 0;
  auto cache = std::make_shared<F32KvCache>(geometry, end + early_rows);
  const std::span<const int32_t> tokens(input.tokens);
  const std::string partition = prefix_cache_partition(input.tenant, input.cache_salt);
  const HeldKv held = reuse_held_kv(input, env, partition, *cache);
  const int64_t reused = held.reused;
  result.reused_tokens = reused;
  result.computed_tokens = end - reused;

  // 3. The header goes out at once; blocks follow as layers complete.
  KvStreamWriter writer(sink);
  KvStreamHeaderInfo info;
  info.model = *env.fingerprint;
  info.codec = input.codec;
  info.transform = input.transform.get();
  info.first_position = input.first_position;
  info.token_ids.assign(input.tokens.begin() + first, input.tokens.end());
  info.prefix_digest = prefix_digest(tokens);
  BATON_ASSIGN_OR_RETURN(v1::KvHeader header, make_kv_header(info));
  BATON_RETURN_IF_ERROR(writer.write_header(header));

  BATON_ASSIGN_OR_RETURN(const v1::CodecParams wire_params, kv_codec_params(input.codec));
  const uint32_t align = kv_block_token_alignment(wire_params, v1::KV_KIND_K);
  const int64_t chunk = std::max<int64_t>(1, input.chunk_tokens);
  const int64_t slice = (chunk + align - 1) / align * align;  // stream slice, tokens
  const KvRope rope = kv_rope_of(model);
  StreamEncoder encoder(*cache, input.codec, input.transform.get(), rope, writer, header, env.encode_threads);
  std::vector<int64_t> emitted(static_cast<size_t>(spec.n_layer), first);  // per layer: sent up to
  // Sends layer `layer` up to the last slice boundary at or below `available`
  // (or to the end once everything is there).
  auto emit = [&](int layer, int64_t available) {
    int64_t upto = available >= end ? end : first + (available - first) / slice * slice;
    int64_t& from = emitted[static_cast<size_t>(layer)];
    if (upto <= from) return;
    encoder.submit({layer, static_cast<uint32_t>(from), static_cast<uint32_t>(upto - from)});
    from = upto;
  };
  for (int layer = 0; layer < spec.n_layer; ++layer) emit(layer, reused);

  // 2. Compute the rest, chunk by chunk, layer by layer.
  const Clock::time_point compute_start = Clock::now();
  backend.begin_sequence();
  absl::Status compute_status;
  for (int64_t pos = reused; pos < end && compute_status.ok();) {
    // Chunks end on stream slice boundaries so each layer's slice can go as soon as it is done.
    const int64_t boundary = pos < first ? std::min(pos + chunk, first) : first + ((pos - first) / slice + 1) * slice;
    const int64_t chunk_end = std::min({boundary, end, pos + std::max(chunk, slice)});
    compute_status = backend.prefill(tokens.subspan(pos, chunk_end - pos), *cache, [&](int layer) -> absl::Status {
      if (cancelled && cancelled()) return absl::CancelledError("the client cancelled the Prefill call");
      BATON_RETURN_IF_ERROR(encoder.status());
      emit(layer, chunk_end);
      return absl::OkStatus();
    });
    pos = chunk_end;
  }
  const Clock::time_point compute_end = Clock::now();
  result.prefill_ms = ms_between(compute_start, compute_end);
  if (!compute_status.ok()) {
    encoder.stop(/*discard=*/true);
    if (absl::IsCancelled(compute_status)) return compute_status;
    absl::Status sent = encoder.status();
    if (!sent.ok()) return sent;  // the client went away: that is the cause
    return absl::Status(compute_status.code(), absl::StrCat("prefill failed: ", compute_status.message()));
  }
  // 3b. The early tokens go out while the encoder still sends the KV.
  if (input.early.has_value()) {
    absl::Status sent = sample_early_tokens(*input.early, env, backend, *cache, urgent ? urgent : sink, job_start,
                                            result, cancelled);
    if (!sent.ok()) {
      encoder.stop(/*discard=*/true);
      return sent;
    }
  }
  BATON_RETURN_IF_ERROR(encoder.drain());
  encoder.stop();
  const Clock::time_point encode_end = Clock::now();
  result.encode_tail_ms = ms_between(compute_end, encode_end);
  if (std::optional<Clock::time_point> t = encoder.first_block_time(); t.has_value()) {
    result.first_block_ms = ms_between(job_start, *t);
  }

  v1::ProducerStats producer;
  producer.set_queue_ms(result.queue_ms);
  producer.set_prefill_ms(result.prefill_ms);
  producer.set_encode_ms(result.encode_tail_ms);
  producer.set_cached_tokens(static_cast<uint32_t>(reused));
  producer.set_computed_tokens(static_cast<uint32_t>(end - reused));
  producer.set_backend(backend.name());
  BATON_RETURN_IF_ERROR(writer.write_trailer(&producer));

  // 4. Keep what was computed for later requests.
  keep_for_later(input, env, partition, held, std::move(cache));
  return result;
}

}  // namespace baton
