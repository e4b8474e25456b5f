#include "common/util/huge_page_buffer.h"

#include <sys/mman.h>

namespace baton {

namespace {
constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
constexpr uintptr_t kPage = 4096;
// bytes rounded up to a multiple of `unit` (a power of two).
uintptr_t round_up(uintptr_t bytes, uintptr_t unit) { return (bytes + unit - 1) & ~(unit - 1); }
uintptr_t page_bytes(int64_t bytes) { return round_up(static_cast<uintptr_t>(bytes), kPage); }
}  // namespace

void* map_huge_pages(int64_t bytes) {
  if (bytes <= 0) return nullptr;
  const uintptr_t size = page_bytes(bytes);
  // 2 MiB more than needed, then the unaligned head and the tail given back.
  void* raw = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = round_up(start, kHugePage);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + size + kHugePage;
  if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
  madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // advice only
  return reinterpret_cast<void*>(aligned);
}

void unmap_pages(void* p, int64_t bytes) {
  if (p != nullptr && bytes > 0) munmap(p, page_bytes(bytes));
}

HugePageBytes allocate_huge_pages(int64_t bytes) {
  return HugePageBytes(static_cast<uint8_t*>(map_huge_pages(bytes)), UnmapDeleter{bytes});
}

}  // namespace baton
