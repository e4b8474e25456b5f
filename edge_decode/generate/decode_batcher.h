// DecodeBatcher: the one door to the device's Engine while several Generate
// turns run at once (baton-edge --max-batch). Each turn keeps its own
// sequential code (its sampler, stop strings, deadline and KV store) and asks
// the batcher for engine work:
//   - decode: the decode steps of every waiting turn run as ONE
//     Engine::decode_rows call (one pass over the weights for up to
//     max_batch sessions); sessions join and leave between steps;
//   - prefill: cut into chunks of at most prefill_chunk_tokens, with at most
//     one chunk between two decode steps, so a newly arrived prompt stalls the
//     running sessions by one chunk at a time, never by its whole prefill.
//
// No scheduler thread: a caller whose request waits and finds the engine idle
// runs the next step itself (the leader), for whichever requests that step
// takes, then wakes their callers. A lone decode request runs at once, so one
// session decodes as fast as without the batcher.
//
// A turn that decodes holds a Seat for its decode loop. A decode step waits
// for the seated turns that have no request waiting (still sampling their
// previous token): a quarter of the last step's time (1..50 ms at most),
// counted from that step's end, so concurrent sessions share every step
// instead of alternating between groups.
//
// Output does not depend on company: each row of a step is bit-identical to
// Engine::decode_step of that token, and a prefill's chunks are cut from its
// own start whatever else runs (Engine::prefill's micro-batches compute each
// position the same way; decode_batcher_test checks both), so a greedy turn
// gives the same tokens alone or among others.
//
// Isolation: a request whose alive check fails before it runs (the client
// left, the deadline passed) is taken out with that status, the others run; a
// step that fails is run again request by request, so only the failing
// request sees its error. Its cache keeps the size it had before the request
// (a prefill: before its first chunk).
//
// Thread-safe. The Engine must not be used by anyone else while the batcher
// serves (its scratch buffers and thread pool are single-caller).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "common/engine/engine.h"
#include "common/kv_cache/kv_cache.h"

namespace baton {

struct DecodeBatcherOptions {
  int max_batch = 4;  // decode requests (sessions) per step, >= 1
  // Tokens of one prefill chunk, rounded up to a multiple of the engine's
  // micro-batch (Engine::max_batch_tokens): a chunk is then a whole number of
  // the micro-batches a single prefill call would run, so chunking never
  // changes a bit of the KV (local prefill stays bit-identical to the
  // cloud's on a lossless store).
  int prefill_chunk_tokens = 64;
  // How long a step waits for seated turns that have not asked yet: a
  // quarter of the last decode step, within [min, max].
  std::chrono::microseconds min_straggler_wait{1'000};
  std::chrono::microseconds max_straggler_wait{50'000};
};

// What a decode step of the batcher did, for a turn's Stats.
struct DecodeStepInfo {
  int requests = 0;  // decode requests the step served (1: this one alone)
};

// The batcher's counters (Health, /metrics, tests).
struct DecodeBatcherStats {
  uint64_t decode_steps = 0;     // Engine passes for decode requests
  uint64_t decode_requests = 0;  // decode requests they served
  uint64_t decode_rows = 0;      // rows (tokens) they ran
  uint64_t prefill_chunks = 0;
  uint64_t prefill_tokens = 0;
  uint64_t removed = 0;          // requests taken out by their alive check
  uint64_t retried_steps = 0;    // failed steps run again request by request
  // [k]: decode steps that served k requests, k in 1..max_batch ([0] unused).
  std::vector<uint64_t> steps_by_requests;
};

class DecodeBatcher {
 public:
  // OK while the caller still wants its request (checked before each step or
  // chunk of it runs, under the batcher's lock: keep it cheap).
  using AliveCheck = std::function<absl::Status()>;

  // One step the batcher ran, as the step observer sees it (tests).
  struct Step {
    enum class Kind { kDecode, kPrefillChunk };
    Kind kind = Kind::kDecode;
    int requests = 0;  // decode: requests served; prefill chunk: 1
    int rows = 0;      // decode: rows; prefill chunk: tokens
    std::vector<const KvCache*> caches;  // the caches the step ran on, in order
  };

  // A turn's place among the decoding turns; the batcher waits (briefly) for
  // a seated turn's next decode request before it runs a step without it.
  // Movable; leaving (destruction or leave()) wakes a step waiting for it.
  class Seat {
   public:
    Seat() = default;
    Seat(Seat&& other) noexcept : batcher_(other.batcher_) { other.batcher_ = nullptr; }
    Seat& operator=(Seat&& other) noexcept;
    Seat(const Seat&) = delete;
    Seat& operator=(const Seat&) = delete;
    ~Seat() { leave(); }
    void leave();
    bool seated() const { return batcher_ != nullptr; }

    // DecodeBatcher::decode and prefill as this turn (a seated turn that
    // waits for either is not waited for).
    absl::Status decode(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* logits,
                        const AliveCheck& alive = {}, DecodeStepInfo* info = nullptr);
    absl::Status prefill(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* last_logits,
                         const AliveCheck& alive = {});
    // Runs `work` on the engine alone, as one step between the batched
    // decode steps (like a prefill chunk): engine work that is not a plain
    // decode step or prefill (a speculative decoder's passes) stays safe
    // among batched turns, though it does not share its pass. `work` must
    // use the engine only while it runs.
    absl::Status exclusive(const std::function<absl::Status(Engine&)>& work);

   private:
    friend class DecodeBatcher;
    explicit Seat(DecodeBatcher* batcher) : batcher_(batcher) {}
    DecodeBatcher* batcher_ = nullptr;
  };

  DecodeBatcher(Engine& engine, DecodeBatcherOptions options);
  DecodeBatcher(const DecodeBatcher&) = delete;
  DecodeBatcher& operator=(const DecodeBatcher&) = delete;

  Seat seat();

  // Runs `tokens` (one decode step, or several consecutive tokens of one
  // sequence such as a speculative draft: at most the engine's
  // max_batch_tokens) at the next positions of `kv` and commits them;
  // logits: [tokens.size(), n_vocab]. Blocks until done. info (optional):
  // how many requests shared the step.
  absl::Status decode(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* logits,
                      const AliveCheck& alive = {}, DecodeStepInfo* info = nullptr);
  // Runs `tokens` at [kv.size(), kv.size() + n) in chunks between decode
  // steps and commits them; last_logits (optional): the last token's,
  // [n_vocab]. On error (or a failed alive check between chunks) the cache
  // keeps its size from before the call.
  absl::Status prefill(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* last_logits,
                       const AliveCheck& alive = {});

  DecodeBatcherStats stats() const;
  const DecodeBatcherOptions& options() const { return options_; }
  const Engine& engine() const { return engine_; }
  // Called by the leader after each step, outside the lock; set before use.
  void set_step_observer(std::function<void(const Step&)> observer) { observer_ = std::move(observer); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Request {
    bool is_prefill = false;
    bool seated = false;
    std::span<const int32_t> tokens;
    KvCache* kv = nullptr;
    std::vector<float>* logits = nullptr;  // decode: [n, n_vocab]; prefill: the last token's (optional)
    const AliveCheck* alive = nullptr;
    // Set: an exclusive step (Seat::exclusive) instead of tokens (no kv).
    const std::function<absl::Status(Engine&)>* work = nullptr;
    Clock::time_point arrival;
    int64_t done_tokens = 0;  // prefill: tokens committed so far
    int64_t start_size = 0;   // prefill: the cache's size before the first chunk
    // Result.
    bool done = false;
    absl::Status status;
    int step_requests = 0;
  };
  // The next step: decode requests, or one chunk of a prefill request.
  struct Work {
    std::vector<Request*> decodes;
    Request* prefill = nullptr;
    bool empty() const { return decodes.empty() && prefill == nullptr; }
  };

  absl::Status submit(Request& request);
  absl::Status submit_prefill(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* last_logits,
                              const AliveCheck& alive, bool seated);
  // Takes out requests whose alive check fails; then the next step, or none
  // (*wait_until set when a decode step waits for seated turns).
  Work pick_locked(Clock::time_point now, std::optional<Clock::time_point>* wait_until);
  void take_decodes_locked(Work& work);
  void finish_locked(Request& request, absl::Status status);
  // Outside the lock (busy_ held).
  void run_decodes(const std::vector<Request*>& requests);
  absl::Status run_decode_alone(Request& request);
  absl::Status run_prefill_chunk(Request& request);
  // After a step, under the lock: results, counters, wake-ups.
  void complete_locked(const Work& work, Clock::duration took);
  Clock::duration straggler_wait_locked() const;

  Engine& engine_;
  const DecodeBatcherOptions options_;  // prefill_chunk_tokens rounded (see DecodeBatcherOptions)
  std::function<void(const Step&)> observer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  std::deque<Request*> decodes_;   // waiting decode requests, in arrival order
  std::deque<Request*> prefills_;  // waiting prefill requests, round robin by chunk
  int seats_ = 0;                  // turns holding a Seat
  bool busy_ = false;              // a leader is running a step
  bool last_was_chunk_ = false;    // the last step was a prefill chunk
  Clock::duration last_decode_step_{};
  Clock::time_point last_step_end_{};
  DecodeBatcherStats stats_;
  // Scratch of the leader (busy_): the rows and logits of a batched step.
  std::vector<Engine::DecodeRow> rows_;
  std::vector<float> step_logits_;  // [rows, n_vocab]
};

}  // namespace baton
