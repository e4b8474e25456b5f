#include "common/util/cpu_features.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/util/log.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace baton {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// XCR0: which register state the OS saves on context switch. Read with inline
// asm because the _xgetbv intrinsic needs -mxsave, and this file is baseline.
uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    char vendor[12];  // EBX, EDX, ECX
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    f.amd = std::memcmp(vendor, "AuthenticAMD", 12) == 0;
  }
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = (ecx >> 27) & 1;
  const bool avx = (ecx >> 28) & 1;
  const bool fma = (ecx >> 12) & 1;
  const bool f16c = (ecx >> 29) & 1;
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;             // XMM | YMM state
  const bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;  // opmask | ZMM_Hi256 | Hi16_ZMM
  if (!os_ymm) return f;

  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  f.avx2 = (ebx >> 5) & 1;
  f.fma = fma;
  f.f16c = f16c;
  if (os_zmm) {
    f.avx512f = (ebx >> 16) & 1;
    f.avx512dq = (ebx >> 17) & 1;
    f.avx512bw = (ebx >> 30) & 1;
    f.avx512vl = (ebx >> 31) & 1;
    f.avx512vnni = (ecx >> 11) & 1;
    f.avx512vbmi = (ecx >> 1) & 1;
  }
  unsigned eax1 = 0, ebx1 = 0, ecx1 = 0, edx1 = 0;
  __cpuid_count(7, 1, eax1, ebx1, ecx1, edx1);
  f.avx_vnni = (eax1 >> 4) & 1;
  f.avx512bf16 = os_zmm && ((eax1 >> 5) & 1);  // vdpbf16ps, vcvtne2ps2bf16
  const bool os_tiles = (xcr0 & 0x60000) == 0x60000;  // XTILECFG | XTILEDATA
  f.amx_int8 = os_tiles && ((edx >> 24) & 1) && ((edx >> 25) & 1);  // AMX-TILE, AMX-INT8
  return f;
}
#else
CpuFeatures detect() { return CpuFeatures{}; }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool amx_int8_usable() {
  static const bool usable = [] {
    if (!cpu_features().amx_int8) return false;
    const char* env = std::getenv("BATON_AMX");
    if (env != nullptr && std::strcmp(env, "0") == 0) return false;
#if defined(__linux__) && defined(__x86_64__)
    // ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA (Linux 5.16+): without it
    // the first tile instruction raises SIGILL.
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
      BATON_WARN("the CPU has AMX-INT8 but Linux refused the tile state (arch_prctl); AMX stays off");
      return false;
    }
    return true;
#else
    return false;
#endif
  }();
  return usable;
}

SimdLevel best_simd_level() {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  if (avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni)
    return SimdLevel::kAvx512;
  if (avx2) return SimdLevel::kAvx2;
  return SimdLevel::kScalar;
}

SimdLevel simd_level_for_request(const char* requested, SimdLevel best) {
  if (requested == nullptr || requested[0] == '\0') return best;
  SimdLevel wanted;
  if (std::strcmp(requested, "scalar") == 0) {
    wanted = SimdLevel::kScalar;
  } else if (std::strcmp(requested, "avx2") == 0) {
    wanted = SimdLevel::kAvx2;
  } else if (std::strcmp(requested, "avx512") == 0) {
    wanted = SimdLevel::kAvx512;
  } else {
    BATON_WARN("BATON_SIMD=%s is not one of scalar|avx2|avx512; using %s", requested,
               simd_level_name(best));
    return best;
  }
  return wanted < best ? wanted : best;
}

SimdLevel active_simd_level() {
  static const SimdLevel level = simd_level_for_request(std::getenv("BATON_SIMD"), best_simd_level());
  return level;
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar: return "scalar";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512";
  }
  return "unknown";
}

}  // namespace baton
