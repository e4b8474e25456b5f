// ThreadSanitizer build only (CMakeLists.txt links this object into every
// executable when BATON_SANITIZE=thread; baton_common leaves it out): makes
// the absl::Mutex and absl::CondVar that gRPC orders its threads with
// visible to TSan.
//
// Why: Debian's libgrpc.so, libgpr.so and libgrpc++.so take every lock
// through absl::Mutex (grpc_core::Mutex and gpr_mu wrap it; grpcpp's
// grpc::internal::Mutex in the reactor headers too), and Debian's
// libabsl_synchronization.so is not built with -fsanitize=thread, so its
// ABSL_TSAN_MUTEX_* annotations are compiled out. TSan then sees none of the
// hand-offs between gRPC's threads: a completion posted under the completion
// queue's lock and taken under it by the thread that runs the callback, the
// executor's work queue, the reactor's backlog lock. It reported every access
// on both sides of them (the handlers' std::function built at service
// construction and read at dispatch, messages and statuses written on one gRPC
// thread and read on another, the CallOpSet reused from write to write).
//
// How: these definitions interpose on the library's (an executable's
// definition comes first in the dynamic linker's search order, and the
// libraries call these functions through their PLT), call the library's own
// (dlsym RTLD_NEXT) and tell TSan what each one does: a lock acquires the
// mutex's address, an unlock releases it, a condition wait releases it before
// blocking and acquires it after waking. They are the orderings these calls
// really give, no more: nothing is suppressed, and memory that gRPC passes
// between threads without a lock (its lock-free queues) stays unordered.
// Lock-order (deadlock) detection is not done for these mutexes.
#include "common/rpc/tsan_annotations.h"

#if defined(BATON_TSAN_ANNOTATIONS)

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/base/config.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace baton {
namespace {

// The library's definition of the absl member whose mangled name, after
// "_ZN4absl<len><inline namespace>", is `suffix`; resolved once (a relaxed
// atomic: a second thread resolving it too gets the same address, and no
// ordering between threads comes from here).
template <typename Fn>
Fn next_definition(std::atomic<void*>& slot, const char* suffix) {
  void* fn = slot.load(std::memory_order_relaxed);
  if (fn == nullptr) {
#if ABSL_OPTION_USE_INLINE_NAMESPACE
    const char* inline_namespace = ABSL_INTERNAL_INLINE_NAMESPACE_STR;
    const std::string mangled =
        "_ZN4absl" + std::to_string(std::strlen(inline_namespace)) + inline_namespace + suffix;
#else
    const std::string mangled = std::string("_ZN4absl") + suffix;
#endif
    fn = dlsym(RTLD_NEXT, mangled.c_str());
    if (fn == nullptr) {
      std::fprintf(stderr, "tsan_absl_sync: %s not found after the executable: %s\n", mangled.c_str(), dlerror());
      std::abort();
    }
    slot.store(fn, std::memory_order_relaxed);
  }
  return reinterpret_cast<Fn>(fn);
}

}  // namespace
}  // namespace baton

namespace absl {
ABSL_NAMESPACE_BEGIN

using baton::next_definition;
using baton::tsan_acquire;
using baton::tsan_release;

void Mutex::Lock() {
  static std::atomic<void*> real{nullptr};
  next_definition<void (*)(Mutex*)>(real, "5Mutex4LockEv")(this);
  tsan_acquire(this);
}

void Mutex::ReaderLock() {
  static std::atomic<void*> real{nullptr};
  next_definition<void (*)(Mutex*)>(real, "5Mutex10ReaderLockEv")(this);
  tsan_acquire(this);
}

bool Mutex::TryLock() {
  static std::atomic<void*> real{nullptr};
  const bool locked = next_definition<bool (*)(Mutex*)>(real, "5Mutex7TryLockEv")(this);
  if (locked) tsan_acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  static std::atomic<void*> real{nullptr};
  const bool locked = next_definition<bool (*)(Mutex*)>(real, "5Mutex13ReaderTryLockEv")(this);
  if (locked) tsan_acquire(this);
  return locked;
}

void Mutex::Unlock() {
  static std::atomic<void*> real{nullptr};
  tsan_release(this);
  next_definition<void (*)(Mutex*)>(real, "5Mutex6UnlockEv")(this);
}

// A reader's release also orders its (read-only) section before the next
// holder; readers do not write, so this hides no race.
void Mutex::ReaderUnlock() {
  static std::atomic<void*> real{nullptr};
  tsan_release(this);
  next_definition<void (*)(Mutex*)>(real, "5Mutex12ReaderUnlockEv")(this);
}

void CondVar::Wait(Mutex* mu) {
  static std::atomic<void*> real{nullptr};
  tsan_release(mu);
  next_definition<void (*)(CondVar*, Mutex*)>(real, "7CondVar4WaitEPNS0_5MutexE")(this, mu);
  tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static std::atomic<void*> real{nullptr};
  tsan_release(mu);
  const bool timed_out = next_definition<bool (*)(CondVar*, Mutex*, Duration)>(
      real, "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE")(this, mu, timeout);
  tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static std::atomic<void*> real{nullptr};
  tsan_release(mu);
  const bool timed_out = next_definition<bool (*)(CondVar*, Mutex*, Time)>(
      real, "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE")(this, mu, deadline);
  tsan_acquire(mu);
  return timed_out;
}

ABSL_NAMESPACE_END
}  // namespace absl

#endif  // BATON_TSAN_ANNOTATIONS
