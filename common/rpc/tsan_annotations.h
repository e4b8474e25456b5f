// Happens-before edges for ThreadSanitizer that gRPC makes with atomics
// inside libgrpc++.so, where TSan cannot see them; no-ops outside a TSan build.
//
// The orderings made inside gRPC's libraries in general (their absl::Mutex
// locks, a batch before its completion, the reference count of a callback
// call) are shown to TSan by common/rpc/tsan_grpc_edges.cc, linked into the
// TSan build's executables, without any help from our code. Two are made by
// reference counts that libgrpc++.so alone drops, and they order our own
// objects, so they are marked here, at the two ends gRPC guarantees:
//  - Server::Shutdown returns only after every callback handler has returned
//    (the server's count of outstanding callback requests): TsanServiceEdges;
//  - a reactor's OnDone runs only after its OnCancel has returned (OnCancel
//    runs on an executor thread, which then drops the call's reference in
//    libgrpc++.so): TsanOnCancelEdge.
// Nothing else of ours is annotated: a reactor callback and a worker thread are
// ordered only by our own mutexes and atomics, so TSan reports a race between
// them.
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

// Everything this thread did so far happens before what a thread does after
// a later tsan_acquire of the same address.
inline void tsan_release([[maybe_unused]] const void* addr) {
#if defined(BATON_TSAN_ANNOTATIONS)
  __tsan_release(const_cast<void*>(addr));
#endif
}

inline void tsan_acquire([[maybe_unused]] const void* addr) {
#if defined(BATON_TSAN_ANNOTATIONS)
  __tsan_acquire(const_cast<void*>(addr));
#endif
}

// OnCancel before OnDone: the last statement of OnCancel is
// `TsanOnCancelEdge::cancelled(this)`, the first of OnDone
// `TsanOnCancelEdge::done(this)`.
struct TsanOnCancelEdge {
  static void cancelled(const void* reactor) { tsan_release(reactor); }
  static void done(const void* reactor) { tsan_acquire(reactor); }
};

// The orderings grpc::Server gives a callback service, for TSan:
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
