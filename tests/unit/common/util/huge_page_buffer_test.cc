#include "common/util/huge_page_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace baton {
namespace {

TEST(HugePageBuffer, IsTwoMebibyteAlignedAndWritableToItsLastByte) {
  for (int64_t bytes : {int64_t{1}, int64_t{64}, int64_t{2} << 20, (int64_t{2} << 20) + 1, int64_t{5} << 20}) {
    const HugePageBytes buffer = allocate_huge_pages(bytes);
    ASSERT_NE(buffer, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.get()) % (uintptr_t{2} << 20), 0u) << bytes;
    std::memset(buffer.get(), 0xab, static_cast<size_t>(bytes));
    EXPECT_EQ(buffer[0], 0xab);
    EXPECT_EQ(buffer[bytes - 1], 0xab);
  }
}

TEST(HugePageBuffer, NothingForNoBytes) {
  EXPECT_EQ(allocate_huge_pages(0), nullptr);
  EXPECT_EQ(allocate_huge_pages(-64), nullptr);
}

TEST(PlaneAllocator, LineAlignedBelowTheThresholdAndOnHugePagesFromIt) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  PlaneAllocator<uint16_t> alloc;
  const size_t at = kHugePlaneBytes / sizeof(uint16_t);
  for (size_t n : {size_t{1}, size_t{33}, at - 1, at, at + 1, 3 * at}) {
    uint16_t* p = alloc.allocate(n);
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n;
    if (n >= at) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHuge, 0u) << n;
    }
    p[0] = 1, p[n - 1] = 2;  // the whole range is writable
    EXPECT_EQ(p[0] + p[n - 1], n == 1 ? 4 : 3);
    alloc.deallocate(p, n);  // each kind freed by its own call (ASan checks the pairing)
  }
}

TEST(PlaneAllocator, BacksAVectorThatGrowsAcrossTheThreshold) {
  std::vector<uint8_t, PlaneAllocator<uint8_t>> v(1000, 7);
  v.resize(kHugePlaneBytes + 5, 9);  // reallocates onto huge pages, keeps the first values
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % (uintptr_t{2} << 20), 0u);
  EXPECT_EQ(v[999], 7);
  EXPECT_EQ(v[1000], 9);
  EXPECT_EQ(v.back(), 9);
  v.assign(10, 3);  // capacity kept: freed once, by the huge-page path, at the end
  v.shrink_to_fit();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 64, 0u);
}

}  // namespace
}  // namespace baton
