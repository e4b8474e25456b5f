// ThreadSanitizer build only (CMakeLists.txt links this object into every
// executable when BATON_SANITIZE=thread; baton_common leaves it out): shows
// TSan the orderings that Debian's gRPC gives between its own threads.
//
// Why: Debian's libgrpc.so, libgpr.so, libgrpc++.so and Abseil are not built
// with -fsanitize=thread, so TSan sees none of the hand-offs between gRPC's
// threads, and it reported every access on both sides of them: the handlers'
// std::function built at service construction and read at dispatch, messages
// and statuses written on one gRPC thread and read on another, the CallOpSet
// and the callback tags that StartWrite fills on our worker thread and that
// the completion reads on a gRPC thread. Two kinds of ordering make them:
//  - locks: every lock in gRPC is an absl::Mutex (grpc_core::Mutex and gpr_mu
//    wrap it; so does grpc::internal::Mutex in the reactor headers), with
//    absl::CondVar, and the library's ABSL_TSAN_MUTEX_* annotations are
//    compiled out;
//  - a batch and its completion: grpc_call_start_batch hands the batch to
//    the call combiner and the transport, which pass it between threads
//    through lock-free queues, and gRPC guarantees that everything before
//    grpc_call_start_batch(tag) happens before the completion of `tag`
//    (grpc_cq_end_op, which runs or queues the callback, or wakes the thread
//    plucking it).
//
// How: the definitions below interpose on the libraries' (an executable's
// definition comes first in the dynamic linker's search order, and the
// libraries call these functions through their PLT: checked with objdump for
// Debian 12's libgrpc.so.29), call the library's own (dlsym RTLD_NEXT) and
// tell TSan what the call does: a lock acquires the mutex's address, an
// unlock releases it, a condition wait releases it before blocking and
// acquires it after waking; grpc_call_start_batch releases its tag and
// grpc_cq_end_op acquires it before the completion is delivered. These are
// the orderings the calls really give, no more: nothing is suppressed or
// left uninstrumented by this file. Lock-order (deadlock) detection is not
// done for gRPC's mutexes.
#include "common/rpc/tsan_annotations.h"

#if defined(BATON_TSAN_ANNOTATIONS)

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include <grpc/grpc.h>

#include "absl/base/config.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace baton {
namespace {

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

#endif  // BATON_TSAN_ANNOTATIONS
