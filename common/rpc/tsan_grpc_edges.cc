// ThreadSanitizer build only (CMakeLists.txt links this object into every
// executable when BATON_SANITIZE=thread; baton_common leaves it out, and the
// regular build never compiles it): shows TSan the orderings that Debian's
// gRPC gives between its own threads, so that our code needs no annotations.
//
// Why: Debian's libgrpc.so, libgpr.so, libgrpc++.so and Abseil are not built
// with -fsanitize=thread, so TSan sees none of the hand-offs between gRPC's
// threads, and it reported every access on both sides of them: the handlers'
// std::function built at service construction and read at dispatch, messages
// and statuses written on one gRPC thread and read on another, the CallOpSet
// and the callback tags that StartWrite fills on our worker thread and that
// the completion reads on a gRPC thread, the call torn down after its last
// reaction. These orderings make them:
//  - locks: every lock in gRPC is an absl::Mutex (grpc_core::Mutex and gpr_mu
//    wrap it; so does grpc::internal::Mutex in the reactor headers), with
//    absl::CondVar, and the library's ABSL_TSAN_MUTEX_* annotations are
//    compiled out;
//  - a batch and its completion: everything before grpc_call_start_batch(tag)
//    happens before the completion of `tag` (grpc_cq_end_op), and everything
//    before grpc_cq_end_op(tag) before the thread that takes the event
//    (grpc_completion_queue_next / _pluck; the C++ callback API's threads take
//    every callback through grpc_completion_queue_next on Linux). In between,
//    the call combiner, the transport and the queue pass it on lock-free;
//  - the end of a callback server call: the reference count that decides
//    when OnDone runs is dropped once in libgrpc++.so (after a non-inline
//    OnCancel), out of TSan's sight (ServerCallbackCall::ScheduleOnDone below).
//
// How: the definitions below interpose on the libraries' (an executable's
// definition comes first in the dynamic linker's search order, and the
// libraries call these functions through their PLT: checked with objdump for
// Debian 12's libgrpc.so.29 and libgrpc++.so.1.51), call the library's own
// (dlsym RTLD_NEXT) and tell TSan what the call does: a lock acquires the
// mutex's address, an unlock releases it, a condition wait releases it before
// blocking and acquires it after waking; grpc_call_start_batch releases its
// tag, grpc_cq_end_op acquires and releases it, the queue's consumer acquires
// it. These are the orderings the calls really give, no more: nothing is
// suppressed or left uninstrumented by this file, and the orderings between
// our own threads (a worker and a reactor callback) must come from our own
// mutexes and atomics, as before. Lock-order (deadlock) detection is not done
// for gRPC's mutexes.
#if defined(__SANITIZE_THREAD__)
#define BATON_TSAN_GRPC_EDGES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BATON_TSAN_GRPC_EDGES 1
#endif
#endif

#if defined(BATON_TSAN_GRPC_EDGES)

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include <sanitizer/tsan_interface.h>

#include <grpc/grpc.h>
#include <grpcpp/support/server_callback.h>

#include "absl/base/config.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace baton {
namespace {

// TSan's happens-before annotations (sanitizer/tsan_interface.h): everything
// this thread did before tsan_release(addr) happens before what a thread
// does after a later tsan_acquire(addr).
void tsan_release(const void* addr) { __tsan_release(const_cast<void*>(addr)); }
void tsan_acquire(const void* addr) { __tsan_acquire(const_cast<void*>(addr)); }

// The libraries' definition of the symbol `mangled`, which this file
// interposes on; resolved once (a relaxed atomic: a second thread resolving it
// too gets the same address, and no ordering between threads comes from here).
template <typename Fn>
Fn next_definition(std::atomic<void*>& slot, const char* mangled) {
  void* fn = slot.load(std::memory_order_relaxed);
  if (fn == nullptr) {
    fn = dlsym(RTLD_NEXT, mangled);
    if (fn == nullptr) {
      std::fprintf(stderr, "tsan_grpc_edges: %s not found after the executable: %s\n", mangled, dlerror());
      std::abort();
    }
    slot.store(fn, std::memory_order_relaxed);
  }
  return reinterpret_cast<Fn>(fn);
}

// A symbol whose mangled name has "4absl<length><inline namespace>" between
// `before` and `after` (Debian's inline namespace is debian3; the substitutions
// in `after` count it, so a build without one is not supported).
static_assert(ABSL_OPTION_USE_INLINE_NAMESPACE == 1, "the mangled names below count Abseil's inline namespace");
template <typename Fn>
Fn next_absl_definition(std::atomic<void*>& slot, const char* before, const char* after) {
  if (void* fn = slot.load(std::memory_order_relaxed)) return reinterpret_cast<Fn>(fn);
  const char* inline_namespace = ABSL_INTERNAL_INLINE_NAMESPACE_STR;
  const std::string mangled =
      std::string(before) + "4absl" + std::to_string(std::strlen(inline_namespace)) + inline_namespace + after;
  return next_definition<Fn>(slot, mangled.c_str());
}

// An Abseil member: _ZN4absl<inline namespace><suffix>.
template <typename Fn>
Fn next_absl_definition(std::atomic<void*>& slot, const char* suffix) {
  return next_absl_definition<Fn>(slot, "_ZN", suffix);
}

}  // namespace
}  // namespace baton

namespace absl {
ABSL_NAMESPACE_BEGIN

using baton::next_absl_definition;
using baton::tsan_acquire;
using baton::tsan_release;

void Mutex::Lock() {
  static std::atomic<void*> real{nullptr};
  next_absl_definition<void (*)(Mutex*)>(real, "5Mutex4LockEv")(this);
  tsan_acquire(this);
}

void Mutex::ReaderLock() {
  static std::atomic<void*> real{nullptr};
  next_absl_definition<void (*)(Mutex*)>(real, "5Mutex10ReaderLockEv")(this);
  tsan_acquire(this);
}

bool Mutex::TryLock() {
  static std::atomic<void*> real{nullptr};
  const bool locked = next_absl_definition<bool (*)(Mutex*)>(real, "5Mutex7TryLockEv")(this);
  if (locked) tsan_acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  static std::atomic<void*> real{nullptr};
  const bool locked = next_absl_definition<bool (*)(Mutex*)>(real, "5Mutex13ReaderTryLockEv")(this);
  if (locked) tsan_acquire(this);
  return locked;
}

void Mutex::Unlock() {
  static std::atomic<void*> real{nullptr};
  tsan_release(this);
  next_absl_definition<void (*)(Mutex*)>(real, "5Mutex6UnlockEv")(this);
}

// A reader's release also orders its (read-only) section before the next
// holder; readers do not write, so this hides no race.
void Mutex::ReaderUnlock() {
  static std::atomic<void*> real{nullptr};
  tsan_release(this);
  next_absl_definition<void (*)(Mutex*)>(real, "5Mutex12ReaderUnlockEv")(this);
}

void CondVar::Wait(Mutex* mu) {
  static std::atomic<void*> real{nullptr};
  tsan_release(mu);
  next_absl_definition<void (*)(CondVar*, Mutex*)>(real, "7CondVar4WaitEPNS0_5MutexE")(this, mu);
  tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static std::atomic<void*> real{nullptr};
  tsan_release(mu);
  const bool timed_out = next_absl_definition<bool (*)(CondVar*, Mutex*, Duration)>(
      real, "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE")(this, mu, timeout);
  tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static std::atomic<void*> real{nullptr};
  tsan_release(mu);
  const bool timed_out = next_absl_definition<bool (*)(CondVar*, Mutex*, Time)>(
      real, "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE")(this, mu, deadline);
  tsan_acquire(mu);
  return timed_out;
}

ABSL_NAMESPACE_END
}  // namespace absl

// gRPC core's internal entry (src/core/lib/surface/completion_queue.h, not
// installed): a batch, call or server shutdown whose tag completes. Declared
// with the same types so that the mangled name is the library's.
struct grpc_cq_completion;
void grpc_cq_end_op(grpc_completion_queue* cq, void* tag, absl::Status error,
                    void (*done)(void* done_arg, grpc_cq_completion* storage), void* done_arg,
                    grpc_cq_completion* storage, bool internal);

extern "C" grpc_call_error grpc_call_start_batch(grpc_call* call, const grpc_op* ops, size_t nops, void* tag,
                                                 void* reserved) {
  static std::atomic<void*> real{nullptr};
  baton::tsan_release(tag);
  return baton::next_definition<grpc_call_error (*)(grpc_call*, const grpc_op*, size_t, void*, void*)>(
      real, "grpc_call_start_batch")(call, ops, nops, tag, reserved);
}

void grpc_cq_end_op(grpc_completion_queue* cq, void* tag, absl::Status error,
                    void (*done)(void* done_arg, grpc_cq_completion* storage), void* done_arg,
                    grpc_cq_completion* storage, bool internal) {
  static std::atomic<void*> real{nullptr};
  baton::tsan_acquire(tag);  // the batch's start
  baton::tsan_release(tag);  // and what this thread did to complete it, for the thread that takes the event
  baton::next_absl_definition<void (*)(grpc_completion_queue*, void*, absl::Status,
                                  void (*)(void*, grpc_cq_completion*), void*, grpc_cq_completion*, bool)>(
      real, "_Z14grpc_cq_end_opP21grpc_completion_queuePvN", "6StatusEPFvS1_P18grpc_cq_completionES1_S6_b")(
      cq, tag, std::move(error), done, done_arg, storage, internal);
}

// A completion queue hands an event from the thread that ended the operation
// to the one that takes it through a lock-free queue (the C++ callback API's
// "nexting" threads take every callback this way on Linux, and run it).
extern "C" grpc_event grpc_completion_queue_next(grpc_completion_queue* cq, gpr_timespec deadline, void* reserved) {
  static std::atomic<void*> real{nullptr};
  const grpc_event event = baton::next_definition<grpc_event (*)(grpc_completion_queue*, gpr_timespec, void*)>(
      real, "grpc_completion_queue_next")(cq, deadline, reserved);
  if (event.type == GRPC_OP_COMPLETE) baton::tsan_acquire(event.tag);
  return event;
}

extern "C" grpc_event grpc_completion_queue_pluck(grpc_completion_queue* cq, void* tag, gpr_timespec deadline,
                                                  void* reserved) {
  static std::atomic<void*> real{nullptr};
  const grpc_event event = baton::next_definition<grpc_event (*)(grpc_completion_queue*, void*, gpr_timespec, void*)>(
      real, "grpc_completion_queue_pluck")(cq, tag, deadline, reserved);
  if (event.type == GRPC_OP_COMPLETE) baton::tsan_acquire(event.tag);
  return event;
}

// A callback server call ends (OnDone, then the call object is destroyed) once
// its reference count drops to zero: every reaction drops a reference
// (std::atomic fetch_sub, acq_rel) and the thread that drops the last one calls
// ScheduleOnDone. The drops compiled from grpcpp's headers into our binary are
// atomics that TSan sees; the one in libgrpc++.so after a non-inline OnCancel
// is not, which left the end of the call unordered after the other reactions.
// Acquiring both counters here stands for that last acq_rel drop.
void grpc::internal::ServerCallbackCall::ScheduleOnDone(bool inline_ondone) {
  static std::atomic<void*> real{nullptr};
  baton::tsan_acquire(&callbacks_outstanding_);
  baton::tsan_acquire(&on_cancel_conditions_remaining_);
  baton::next_definition<void (*)(ServerCallbackCall*, bool)>(
      real, "_ZN4grpc8internal18ServerCallbackCall14ScheduleOnDoneEb")(this, inline_ondone);
}

#endif  // BATON_TSAN_GRPC_EDGES
