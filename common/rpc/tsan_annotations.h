// Happens-before edges that gRPC provides but ThreadSanitizer cannot see.
//
// Debian's libgrpc.so (and the Abseil mutexes and atomics inside it) are not
// built with -fsanitize=thread, so TSan does not see that gRPC orders a
// reactor's StartWrite / StartRead / Finish before the matching OnWriteDone /
// OnReadDone / OnDone running on another gRPC thread. Without these edges it
// reports every access to reactor state on both sides as a race. Each reactor
// calls tsan_release(this) right before handing work to gRPC, holds a
// TsanReaction over each reaction (OnWriteDone, OnReadDone, OnCancel) and
// calls tsan_acquire(this) at the top of OnDone; all are no-ops outside a
// TSan build. The accesses that gRPC's own header code makes inside those
// calls (serialization in StartWrite, binding the reactor after the handler
// returns) are not instrumented at all: tests/tsan-ignorelist.txt. Orderings
// between our own threads must still go through our own mutexes: these edges
// only stand for the ones inside gRPC.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define BATON_TSAN_ANNOTATIONS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BATON_TSAN_ANNOTATIONS 1
#endif
#endif

#if defined(BATON_TSAN_ANNOTATIONS)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace baton {

// Before a call that hands work to gRPC (StartWrite, StartRead, Finish, ...):
// everything this thread did so far happens before the callback that
// acquires the same address.
inline void tsan_release([[maybe_unused]] const void* addr) {
#if defined(BATON_TSAN_ANNOTATIONS)
  __tsan_release(const_cast<void*>(addr));
#endif
}

// At the top of a gRPC callback (OnWriteDone, OnReadDone, OnCancel, OnDone).
inline void tsan_acquire([[maybe_unused]] const void* addr) {
#if defined(BATON_TSAN_ANNOTATIONS)
  __tsan_acquire(const_cast<void*>(addr));
#endif
}

// The body of a reaction (OnWriteDone, OnReadDone, OnCancel): acquires at
// the start and releases at the end, so that OnDone, which gRPC runs only
// after every reaction has returned, is ordered after all of it. For the same
// reason the reactor outlives the guard even when the reaction calls Finish.
class TsanReaction {
 public:
  explicit TsanReaction(const void* reactor) : reactor_(reactor) { tsan_acquire(reactor_); }
  ~TsanReaction() { tsan_release(reactor_); }
  TsanReaction(const TsanReaction&) = delete;
  TsanReaction& operator=(const TsanReaction&) = delete;

 private:
  const void* reactor_;
};

// The orderings grpc::Server gives a callback service, for TSan (which does
// not see the locks inside libgrpc.so that make them):
//  - gRPC runs a handler only after the server started, so all the set-up of
//    the service happens before: started() right before BuildAndStart, and a
//    Handler guard, the first statement of every handler, acquires it;
//  - Server::Shutdown returns only after every handler has returned (it waits
//    for all its callback requests to drain), so the service may be torn
//    down afterwards: the guard releases when the handler returns, and
//    shut_down() acquires right after Server::Shutdown.
// Two addresses, so that no edge runs from one handler to another: handlers
// running at the same time stay unordered for TSan, as they are.
class TsanServiceEdges {
 public:
  void started() const { tsan_release(&started_); }
  void shut_down() const { tsan_acquire(&returned_); }

  class Handler {
   public:
    explicit Handler(const TsanServiceEdges& edges) : edges_(edges) { tsan_acquire(&edges_.started_); }
    ~Handler() { tsan_release(&edges_.returned_); }
    Handler(const Handler&) = delete;
    Handler& operator=(const Handler&) = delete;

   private:
    const TsanServiceEdges& edges_;
  };

 private:
  char started_ = 0;
  char returned_ = 0;
};

}  // namespace baton
