#include "common/util/huge_page_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

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

}  // namespace
}  // namespace baton
