#include "common/util/huge_page_buffer.h"

#include <sys/mman.h>

namespace baton {

HugePageBytes allocate_huge_pages(int64_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  if (bytes <= 0) return nullptr;
  const size_t allocated = (static_cast<size_t>(bytes) + kHugePage - 1) / kHugePage * kHugePage;
  HugePageBytes buffer(static_cast<uint8_t*>(std::aligned_alloc(kHugePage, allocated)));
  if (buffer != nullptr) madvise(buffer.get(), allocated, MADV_HUGEPAGE);  // advice only
  return buffer;
}

}  // namespace baton
