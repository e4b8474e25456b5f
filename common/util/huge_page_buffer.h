// Memory that a kernel streams end to end on every pass (the packed weights
// a decode step reads whole per token, the bandwidth reader's buffer): 2
// MiB-aligned and asked for transparent huge pages, so a stream takes a TLB
// miss per 2 MiB instead of per 4 KiB (huge pages measured 1.03-1.09x decode
// tok/s for the packed weights, and the reader ~10% faster on the AVX2
// host; README, Benchmarks).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace baton {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using HugePageBytes = std::unique_ptr<uint8_t[], FreeDeleter>;

// At least `bytes` bytes (rounded up to whole 2 MiB pages), uninitialized;
// null when the allocation fails. The huge pages are advice (madvise): where
// transparent huge pages are off, the pages stay 4 KiB.
HugePageBytes allocate_huge_pages(int64_t bytes);

// A std::vector allocator for planes that a kernel streams whole (the KV
// store's codes and scales): 64-byte aligned (a 64-byte row never straddles
// two lines), and from kHugePlaneBytes up on 2 MiB huge pages
// (allocate_huge_pages; its rounding to whole pages is at most 2 MiB, a
// quarter of the smallest such plane, so small stores keep their size).
// Decode attention reads every plane of the store once per token: on 4 KiB
// pages its TLB missed every 4 KiB (INT8-g32 store, context 16384: 12.8
// against 13.8-14.2 ms of attention a token; README, Benchmarks).
inline constexpr size_t kHugePlaneBytes = size_t{8} << 20;

template <typename T>
struct PlaneAllocator {
  using value_type = T;
  PlaneAllocator() = default;
  template <typename U>
  PlaneAllocator(const PlaneAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator
  T* allocate(size_t n) {
    if (n * sizeof(T) < kHugePlaneBytes) return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64}));
    auto* p = reinterpret_cast<T*>(allocate_huge_pages(static_cast<int64_t>(n * sizeof(T))).release());
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  // n is allocate's (as std::vector passes it): it tells which of the two gave p.
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHugePlaneBytes) return ::operator delete(p, std::align_val_t{64});
    FreeDeleter()(p);
  }
  template <typename U>
  bool operator==(const PlaneAllocator<U>&) const { return true; }
};

}  // namespace baton
