#include "edge_decode/generate/decode_batcher.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "common/util/check.h"

namespace baton {

DecodeBatcher::Seat& DecodeBatcher::Seat::operator=(Seat&& other) noexcept {
  if (this != &other) {
    leave();
    batcher_ = other.batcher_;
    other.batcher_ = nullptr;
  }
  return *this;
}

void DecodeBatcher::Seat::leave() {
  if (batcher_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(batcher_->mu_);
    --batcher_->seats_;
  }
  batcher_->cv_.notify_all();  // a step waiting for this turn need not
  batcher_ = nullptr;
}

absl::Status DecodeBatcher::Seat::decode(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* logits,
                                         const AliveCheck& alive, DecodeStepInfo* info) {
  BATON_CHECK(batcher_ != nullptr, "decode on a seat that left");
  Request request;
  request.seated = true;
  request.tokens = tokens;
  request.kv = &kv;
  request.logits = logits;
  request.alive = alive ? &alive : nullptr;
  absl::Status status = batcher_->submit(request);
  if (info != nullptr) info->requests = request.step_requests;
  return status;
}

namespace {

DecodeBatcherOptions rounded(DecodeBatcherOptions options, int micro_batch) {
  BATON_CHECK(options.max_batch >= 1 && options.prefill_chunk_tokens >= 1 && micro_batch >= 1,
              "batcher options must be positive");
  options.prefill_chunk_tokens = (options.prefill_chunk_tokens + micro_batch - 1) / micro_batch * micro_batch;
  return options;
}

}  // namespace

DecodeBatcher::DecodeBatcher(Engine& engine, DecodeBatcherOptions options)
    : engine_(engine), options_(rounded(options, engine.max_batch_tokens())) {
  stats_.steps_by_requests.assign(static_cast<size_t>(options_.max_batch) + 1, 0);
}

DecodeBatcher::Seat DecodeBatcher::seat() {
  std::lock_guard<std::mutex> lock(mu_);
  ++seats_;
  return Seat(this);
}

absl::Status DecodeBatcher::decode(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* logits,
                                   const AliveCheck& alive, DecodeStepInfo* info) {
  Request request;
  request.tokens = tokens;
  request.kv = &kv;
  request.logits = logits;
  request.alive = alive ? &alive : nullptr;
  absl::Status status = submit(request);
  if (info != nullptr) info->requests = request.step_requests;
  return status;
}

absl::Status DecodeBatcher::Seat::prefill(std::span<const int32_t> tokens, KvCache& kv,
                                          std::vector<float>* last_logits, const AliveCheck& alive) {
  BATON_CHECK(batcher_ != nullptr, "prefill on a seat that left");
  return batcher_->submit_prefill(tokens, kv, last_logits, alive, /*seated=*/true);
}

absl::Status DecodeBatcher::Seat::exclusive(const std::function<absl::Status(Engine&)>& work) {
  BATON_CHECK(batcher_ != nullptr, "exclusive on a seat that left");
  Request request;
  request.is_prefill = true;  // queued and run as one prefill chunk would be
  request.seated = true;
  request.work = &work;
  return batcher_->submit(request);
}

absl::Status DecodeBatcher::prefill(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* last_logits,
                                    const AliveCheck& alive) {
  return submit_prefill(tokens, kv, last_logits, alive, /*seated=*/false);
}

absl::Status DecodeBatcher::submit_prefill(std::span<const int32_t> tokens, KvCache& kv,
                                           std::vector<float>* last_logits, const AliveCheck& alive, bool seated) {
  if (tokens.empty()) return absl::InvalidArgumentError("prefill needs at least one token");
  Request request;
  request.is_prefill = true;
  request.seated = seated;
  request.tokens = tokens;
  request.kv = &kv;
  request.logits = last_logits;
  request.alive = alive ? &alive : nullptr;
  return submit(request);
}

DecodeBatcherStats DecodeBatcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

absl::Status DecodeBatcher::submit(Request& request) {
  if (!request.is_prefill) {
    BATON_CHECK(request.logits != nullptr, "a decode request needs its logits");
    if (request.tokens.empty()) return absl::InvalidArgumentError("decode needs at least one token");
  }
  std::unique_lock<std::mutex> lock(mu_);
  request.arrival = Clock::now();
  if (request.kv != nullptr) request.start_size = request.kv->size();
  (request.is_prefill ? prefills_ : decodes_).push_back(&request);
  cv_.notify_all();  // a leader waiting for this seated turn
  while (!request.done) {
    if (busy_) {
      cv_.wait(lock);
      continue;
    }
    std::optional<Clock::time_point> wait_until;
    Work work = pick_locked(Clock::now(), &wait_until);
    if (work.empty()) {
      if (request.done) break;  // its alive check took it out
      if (wait_until.has_value()) {
        cv_.wait_until(lock, *wait_until);
      } else {
        cv_.wait(lock);
      }
      continue;
    }
    busy_ = true;
    lock.unlock();
    const Clock::time_point start = Clock::now();
    const int64_t chunk_tokens =
        work.prefill == nullptr ? 0
                                : std::min<int64_t>(options_.prefill_chunk_tokens,
                                                    static_cast<int64_t>(work.prefill->tokens.size()) -
                                                        work.prefill->done_tokens);
    if (work.prefill != nullptr) {
      work.prefill->status = run_prefill_chunk(*work.prefill);
    } else {
      run_decodes(work.decodes);
    }
    const Clock::duration took = Clock::now() - start;
    if (observer_) {
      Step step;
      step.kind = work.prefill != nullptr ? Step::Kind::kPrefillChunk : Step::Kind::kDecode;
      if (work.prefill != nullptr) {
        step.requests = 1;
        step.rows = static_cast<int>(chunk_tokens);
        step.caches.push_back(work.prefill->kv);
      } else {
        step.requests = static_cast<int>(work.decodes.size());
        for (const Request* r : work.decodes) {
          step.rows += static_cast<int>(r->tokens.size());
          step.caches.push_back(r->kv);
        }
      }
      observer_(step);
    }
    lock.lock();
    busy_ = false;
    complete_locked(work, took);
    cv_.notify_all();
  }
  return request.status;
}

DecodeBatcher::Work DecodeBatcher::pick_locked(Clock::time_point now, std::optional<Clock::time_point>* wait_until) {
  // Requests whose caller no longer wants them leave first.
  for (std::deque<Request*>* queue : {&decodes_, &prefills_}) {
    for (auto it = queue->begin(); it != queue->end();) {
      Request& r = **it;
      absl::Status alive = r.alive != nullptr ? (*r.alive)() : absl::OkStatus();
      if (alive.ok()) {
        ++it;
        continue;
      }
      if (r.is_prefill && r.kv != nullptr) r.kv->set_size(r.start_size);
      ++stats_.removed;
      finish_locked(r, std::move(alive));
      it = queue->erase(it);
    }
  }
  Work work;
  // Decode steps and prefill chunks alternate while both wait.
  if ((!decodes_.empty() || seats_ > 0) && (prefills_.empty() || last_was_chunk_)) {
    // Seated turns still sampling their last token are about to ask: wait
    // for them (briefly) so that they share this step (and, after a chunk,
    // so that a second chunk does not run before them).
    auto seated = [](const Request* r) { return r->seated; };
    const int seated_waiting = static_cast<int>(std::count_if(decodes_.begin(), decodes_.end(), seated) +
                                                std::count_if(prefills_.begin(), prefills_.end(), seated));
    if (static_cast<int>(decodes_.size()) < options_.max_batch && seated_waiting < seats_) {
      // From the last step's end at the earliest: the turns it served
      // cannot ask before it, so a request that came while it ran has
      // waited for that step, not for them. (From its arrival, the turns
      // split into two groups whose steps alternate: each group's requests
      // wait through the other's step and then find their wait spent.)
      const Clock::time_point since =
          decodes_.empty() ? last_step_end_ : std::max(decodes_.front()->arrival, last_step_end_);
      const Clock::time_point deadline = since + straggler_wait_locked();
      if (now < deadline) {
        *wait_until = deadline;
        return work;
      }
    }
    if (!decodes_.empty()) {
      take_decodes_locked(work);
      return work;
    }
  }
  if (!prefills_.empty()) {
    work.prefill = prefills_.front();
    prefills_.pop_front();
  }
  return work;
}

void DecodeBatcher::take_decodes_locked(Work& work) {
  int rows = 0;
  std::vector<const KvCache*> caches;
  for (auto it = decodes_.begin(); it != decodes_.end() && static_cast<int>(work.decodes.size()) < options_.max_batch;) {
    Request* r = *it;
    const int n = static_cast<int>(r->tokens.size());
    // The engine's batch bounds the rows (a first request alone may pass it:
    // the engine then says so), and one cache runs once per step.
    const bool fits = work.decodes.empty() || rows + n <= engine_.max_batch_tokens();
    if (!fits || std::find(caches.begin(), caches.end(), r->kv) != caches.end()) {
      ++it;
      continue;
    }
    rows += n;
    caches.push_back(r->kv);
    work.decodes.push_back(r);
    it = decodes_.erase(it);
  }
}

void DecodeBatcher::finish_locked(Request& request, absl::Status status) {
  request.status = std::move(status);
  request.done = true;
}

void DecodeBatcher::run_decodes(const std::vector<Request*>& requests) {
  if (requests.size() == 1) {
    requests[0]->status = run_decode_alone(*requests[0]);
    return;
  }
  const size_t n_vocab = static_cast<size_t>(engine_.model().spec().n_vocab);
  rows_.clear();
  for (const Request* r : requests) {
    for (int32_t token : r->tokens) rows_.push_back(Engine::DecodeRow{token, r->kv});
  }
  step_logits_.resize(rows_.size() * n_vocab);
  absl::Status status = engine_.decode_rows(rows_, step_logits_.data());
  if (status.ok()) {
    size_t row = 0;
    for (Request* r : requests) {
      const size_t n = r->tokens.size() * n_vocab;
      r->logits->assign(step_logits_.begin() + static_cast<std::ptrdiff_t>(row),
                        step_logits_.begin() + static_cast<std::ptrdiff_t>(row + n));
      row += n;
      r->status = absl::OkStatus();
    }
    return;
  }
  // Every cache kept its size: run each request alone, so only the one at
  // fault sees the error.
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.retried_steps;
  }
  for (Request* r : requests) r->status = run_decode_alone(*r);
}

absl::Status DecodeBatcher::run_decode_alone(Request& request) {
  if (request.tokens.size() == 1) return engine_.decode_step(request.tokens[0], *request.kv, request.logits);
  std::vector<Engine::DecodeRow> rows;
  for (int32_t token : request.tokens) rows.push_back(Engine::DecodeRow{token, request.kv});
  request.logits->resize(request.tokens.size() * static_cast<size_t>(engine_.model().spec().n_vocab));
  return engine_.decode_rows(rows, request.logits->data());
}

absl::Status DecodeBatcher::run_prefill_chunk(Request& request) {
  if (request.work != nullptr) return (*request.work)(engine_);  // done: it has no tokens
  const int64_t total = static_cast<int64_t>(request.tokens.size());
  const int64_t count = std::min<int64_t>(options_.prefill_chunk_tokens, total - request.done_tokens);
  const bool last = request.done_tokens + count == total;
  absl::Status status =
      engine_.prefill(request.tokens.subspan(static_cast<size_t>(request.done_tokens), static_cast<size_t>(count)),
                      *request.kv, last ? request.logits : nullptr);
  if (!status.ok()) {
    request.kv->set_size(request.start_size);
    return status;
  }
  request.done_tokens += count;
  return absl::OkStatus();
}

void DecodeBatcher::complete_locked(const Work& work, Clock::duration took) {
  last_step_end_ = Clock::now();
  if (work.prefill != nullptr) {
    Request& r = *work.prefill;
    last_was_chunk_ = true;
    ++stats_.prefill_chunks;
    if (!r.status.ok() || r.done_tokens == static_cast<int64_t>(r.tokens.size())) {
      if (r.status.ok()) stats_.prefill_tokens += r.tokens.size();
      finish_locked(r, r.status);
    } else {
      prefills_.push_back(&r);  // its next chunk after the other prefills' (round robin)
    }
    return;
  }
  last_was_chunk_ = false;
  last_decode_step_ = took;
  const int served = static_cast<int>(work.decodes.size());
  ++stats_.decode_steps;
  stats_.decode_requests += static_cast<uint64_t>(served);
  ++stats_.steps_by_requests[static_cast<size_t>(served)];
  for (Request* r : work.decodes) {
    stats_.decode_rows += r->tokens.size();
    r->step_requests = served;
    finish_locked(*r, r->status);
  }
}

DecodeBatcher::Clock::duration DecodeBatcher::straggler_wait_locked() const {
  const Clock::duration quarter = last_decode_step_ / 4;
  return std::clamp<Clock::duration>(quarter, options_.min_straggler_wait,
                                     std::max(options_.min_straggler_wait, options_.max_straggler_wait));
}

}  // namespace baton
