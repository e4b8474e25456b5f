#include "common/util/huge_page_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
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

// The VmFlags line of /proc/self/smaps for the mapping that holds addr
// ("" when none does).
std::string vm_flags_of(uintptr_t addr) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = addr >= lo && addr < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

bool has_flag(const std::string& vm_flags, const std::string& flag) {
  std::istringstream words(vm_flags);
  for (std::string w; words >> w;) {
    if (w == flag) return true;
  }
  return false;
}

// Whether this kernel takes MADV_HUGEPAGE at all (built with transparent huge pages).
bool kernel_has_thp() { return std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good(); }

constexpr uintptr_t kHuge = uintptr_t{2} << 20;

TEST(HugePageBuffer, ZeroedAdvisedAndUnmappedWhenReleased) {
  for (int64_t bytes : {int64_t{4096}, (int64_t{2} << 20) + 64, int64_t{7} << 20}) {
    HugePageBytes buffer = allocate_huge_pages(bytes);
    ASSERT_NE(buffer, nullptr) << bytes;
    const auto at = reinterpret_cast<uintptr_t>(buffer.get());
    EXPECT_EQ(buffer[0], 0) << bytes;
    EXPECT_EQ(buffer[bytes - 1], 0) << bytes;
    buffer[bytes - 1] = 1;
    if (kernel_has_thp()) {
      EXPECT_TRUE(has_flag(vm_flags_of(at), "hg")) << bytes;
    }
    HugePageBytes moved = std::move(buffer);  // the size travels with the deleter
    moved.reset();
    EXPECT_EQ(vm_flags_of(at), "") << bytes;
  }
}

TEST(MapHugePages, TwoMebibyteAlignedZeroedWritableAndAdvised) {
  for (int64_t bytes : {int64_t{1}, int64_t{4097}, (int64_t{2} << 20) + 1, int64_t{9} << 20}) {
    auto* p = static_cast<uint8_t*>(map_huge_pages(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHuge, 0u) << bytes;
    EXPECT_EQ(p[0], 0);
    EXPECT_EQ(p[bytes - 1], 0);
    p[0] = 1, p[bytes - 1] = 2;
    if (kernel_has_thp()) {
      EXPECT_TRUE(has_flag(vm_flags_of(reinterpret_cast<uintptr_t>(p)), "hg")) << bytes;
    }
    unmap_pages(p, bytes);
    // Given back whole: no mapping holds its first page any more.
    EXPECT_EQ(vm_flags_of(reinterpret_cast<uintptr_t>(p)), "") << bytes;
  }
  EXPECT_EQ(map_huge_pages(0), nullptr);
  EXPECT_EQ(map_huge_pages(-5), nullptr);
}

TEST(PlaneAllocator, LineAlignedAndAdvisedFromTheThresholdUp) {
  PlaneAllocator<uint16_t> alloc;
  const size_t at = kHugePlaneBytes / sizeof(uint16_t);
  for (size_t n : {size_t{1}, size_t{33}, at - 1, at, 3 * at + 5}) {
    uint16_t* p = alloc.allocate(n);
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n;
    p[0] = 1, p[n - 1] = 2;  // the whole range is writable
    EXPECT_EQ(p[0] + p[n - 1], n == 1 ? 4 : 3);
    if (n >= at) {  // its own mapping, on huge pages where the kernel has them
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHuge, 0u) << n;
      if (kernel_has_thp()) {
        EXPECT_TRUE(has_flag(vm_flags_of(reinterpret_cast<uintptr_t>(p)), "hg")) << n;
      }
    }
    alloc.deallocate(p, n);
  }
}

TEST(PlaneAllocator, BacksAVectorThatGrowsAcrossTheThreshold) {
  std::vector<uint8_t, PlaneAllocator<uint8_t>> v(1000, 7);
  v.resize(kHugePlaneBytes + 5, 9);  // reallocates onto its own mapping, keeps the first values
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % kHuge, 0u);
  EXPECT_EQ(v[999], 7);
  EXPECT_EQ(v[1000], 9);
  EXPECT_EQ(v.back(), 9);
  v.assign(10, 3);
  v.shrink_to_fit();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 64, 0u);
  EXPECT_EQ(v[9], 3);
}

}  // namespace
}  // namespace baton
