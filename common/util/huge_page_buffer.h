// Memory that a kernel streams end to end on every pass (the packed weights
// a decode step reads whole per token, the bandwidth reader's buffer): 2
// MiB-aligned and asked for transparent huge pages, so a stream takes a TLB
// miss per 2 MiB instead of per 4 KiB (huge pages measured 1.03-1.09x decode
// tok/s for the packed weights, and the reader ~10% faster on the AVX2
// host; README, Benchmarks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace baton {

// A fresh anonymous mapping of `bytes` (rounded up to 4 KiB pages only),
// starting on a 2 MiB boundary and asked for transparent huge pages (advice:
// where transparent huge pages are off, the pages stay 4 KiB): every whole 2
// MiB page of it can be huge, and nothing past the last 4 KiB page is held.
// Zero-filled. Null when `bytes` <= 0 or the mapping fails. Give it back
// with unmap_pages(p, the same bytes).
void* map_huge_pages(int64_t bytes);
void unmap_pages(void* p, int64_t bytes);

// map_huge_pages as an owning pointer: its deleter keeps the size to unmap.
// (Until the thirty-fourth session a second allocator, aligned_alloc rounded
// up to whole 2 MiB pages plus madvise, served these buffers: one mapping
// path now, and a buffer holds the 4 KiB pages it asks for.)
struct UnmapDeleter {
  int64_t bytes = 0;
  void operator()(uint8_t* p) const { unmap_pages(p, bytes); }
};
using HugePageBytes = std::unique_ptr<uint8_t[], UnmapDeleter>;

// map_huge_pages(bytes), owned; null when `bytes` <= 0 or the mapping fails.
HugePageBytes allocate_huge_pages(int64_t bytes);

// A std::vector allocator for planes that a kernel streams whole (the KV
// store's codes and scales): 64-byte aligned (a 64-byte row never straddles
// two lines), and from kHugePlaneBytes up a mapping of its own on huge
// pages (map_huge_pages: no 2 MiB rounding, so a store holds the bytes it
// counts). Decode attention reads every plane of the store once per token,
// each head's rows one run: on 4 KiB pages its stream (and the prefetch of
// the next tile, a new page every tile) took a page walk per 4 KiB (INT8-g32
// store, context 16384: 12.4-12.7 against 13.6-14.1 ms of attention a token;
// README, Benchmarks). Its own mapping, not madvise over what malloc gives:
// a plane malloc took from the heap's already touched pages stayed on 4 KiB
// pages.
inline constexpr size_t kHugePlaneBytes = size_t{4} << 20;

template <typename T>
struct PlaneAllocator {
  using value_type = T;
  PlaneAllocator() = default;
  template <typename U>
  PlaneAllocator(const PlaneAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator
  T* allocate(size_t n) {
    if (n * sizeof(T) < kHugePlaneBytes) return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64}));
    void* p = map_huge_pages(static_cast<int64_t>(n * sizeof(T)));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  // n is allocate's (std::vector passes it back): it tells which gave p.
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHugePlaneBytes) return ::operator delete(p, std::align_val_t{64});
    unmap_pages(p, static_cast<int64_t>(n * sizeof(T)));
  }
  template <typename U>
  bool operator==(const PlaneAllocator<U>&) const { return true; }
};

}  // namespace baton
