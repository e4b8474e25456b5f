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

namespace baton {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using HugePageBytes = std::unique_ptr<uint8_t[], FreeDeleter>;

// At least `bytes` bytes (rounded up to whole 2 MiB pages), uninitialized;
// null when the allocation fails. The huge pages are advice (madvise): where
// transparent huge pages are off, the pages stay 4 KiB.
HugePageBytes allocate_huge_pages(int64_t bytes);

}  // namespace baton
