// Which AVX-512 instructions share execution pipes on this core: 8
// independent chains of one instruction, or of two interleaved, in a loop
// (no chain longer than one instruction per iteration, so latency is
// hidden); items/s = instructions. Two kinds that each run at 2 a cycle
// alone and at 2 a cycle together share their pipes; at more, they do not.
// What the decode tile kernel's port bound is counted with (README,
// "Fortieth session"): on Zen 5 vpdpbusd shares its two pipes with vmulps
// and vfmadd231ps, not with vaddps; vscalefps and vreduceps run at 1 a
// cycle; vpdpbusd with a broadcast dword or a whole vector from L1 as its
// source (mixes 9, 10) at 2 a cycle too. Written in assembly (AT&T), so the file needs no ISA flags; run
// only where the CPU has AVX-512 VNNI and VBMI.
//   build/bin/baton_microbench --benchmark_filter=BM_VectorPorts
#include <benchmark/benchmark.h>

#include <cstdint>

#include "common/util/cpu_features.h"

namespace baton {
namespace {

#define BATON_PORTS_CLOBBERS                                                                                      \
  "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", \
      "zmm14", "zmm15"
// 8 of `a` into zmm0-7 (sources zmm20, zmm21), or 8 of `a` each followed by
// one of `b` into zmm8-15, per iteration.
#define BATON_ONE(a, r) a " %%zmm20, %%zmm21, %%zmm" #r "\n\t"
#define BATON_PAIR(a, b, r, s) BATON_ONE(a, r) BATON_ONE(b, s)
#define BATON_EIGHT(a)                                                                                        \
  BATON_ONE(a, 0) BATON_ONE(a, 1) BATON_ONE(a, 2) BATON_ONE(a, 3) BATON_ONE(a, 4) BATON_ONE(a, 5) BATON_ONE(a, 6) \
  BATON_ONE(a, 7)
#define BATON_EIGHT_PAIRS(a, b)                                                                              \
  BATON_PAIR(a, b, 0, 8) BATON_PAIR(a, b, 1, 9) BATON_PAIR(a, b, 2, 10) BATON_PAIR(a, b, 3, 11)               \
  BATON_PAIR(a, b, 4, 12) BATON_PAIR(a, b, 5, 13) BATON_PAIR(a, b, 6, 14) BATON_PAIR(a, b, 7, 15)
#define BATON_LOOP(body) \
  asm volatile("1:\n\t" body "sub $1, %0\n\tjnz 1b" : "+r"(n) : : BATON_PORTS_CLOBBERS)

// The same with a memory source (%1: 64 aligned bytes in L1), `m` its
// operand form: a dword broadcast ("(%1)%{1to16%}") or the whole vector
// ("(%1)"): 8 dwords of one line, or the 4 lines of g_line twice.
#define BATON_MEM(a, m, off, r) a " " #off m ", %%zmm21, %%zmm" #r "\n\t"
#define BATON_EIGHT_MEM(a, m)                                                                              \
  BATON_MEM(a, m, 0, 0) BATON_MEM(a, m, 4, 1) BATON_MEM(a, m, 8, 2) BATON_MEM(a, m, 12, 3) BATON_MEM(a, m, 16, 4) \
  BATON_MEM(a, m, 20, 5) BATON_MEM(a, m, 24, 6) BATON_MEM(a, m, 28, 7)
#define BATON_EIGHT_MEM512(a)                                                                                \
  BATON_MEM(a, "(%1)", 0, 0) BATON_MEM(a, "(%1)", 64, 1) BATON_MEM(a, "(%1)", 128, 2) BATON_MEM(a, "(%1)", 192, 3)     \
  BATON_MEM(a, "(%1)", 0, 4) BATON_MEM(a, "(%1)", 64, 5) BATON_MEM(a, "(%1)", 128, 6) BATON_MEM(a, "(%1)", 192, 7)
#define BATON_LOOP_MEM(body) \
  asm volatile("1:\n\t" body "sub $1, %0\n\tjnz 1b" : "+r"(n) : "r"(line) : BATON_PORTS_CLOBBERS, "memory")

alignas(64) int32_t g_line[64];

// The loop for mix m, n iterations; returns the instructions per iteration.
int run_mix(int mix, int64_t n) {
  const int32_t* line = g_line;
  switch (mix) {
    case 9: BATON_LOOP_MEM(BATON_EIGHT_MEM("vpdpbusd", "(%1)%{1to16%}")); return 8;
    case 10: BATON_LOOP_MEM(BATON_EIGHT_MEM512("vpdpbusd")); return 8;
    case 0: BATON_LOOP(BATON_EIGHT("vpdpbusd")); return 8;
    case 1: BATON_LOOP(BATON_EIGHT("vmulps")); return 8;
    case 2: BATON_LOOP(BATON_EIGHT("vaddps")); return 8;
    case 3: BATON_LOOP(BATON_EIGHT_PAIRS("vpdpbusd", "vmulps")); return 16;
    case 4: BATON_LOOP(BATON_EIGHT_PAIRS("vpdpbusd", "vfmadd231ps")); return 16;
    case 5: BATON_LOOP(BATON_EIGHT_PAIRS("vpdpbusd", "vaddps")); return 16;
    case 6: BATON_LOOP(BATON_EIGHT_PAIRS("vpdpbusd", "vpermb")); return 16;
    case 7: BATON_LOOP(BATON_EIGHT("vscalefps")); return 8;
    default: BATON_LOOP(BATON_EIGHT_PAIRS("vpdpbusd", "vscalefps")); return 16;
  }
}

const char* const kMixNames[] = {"vpdpbusd",          "vmulps",           "vaddps",
                                 "vpdpbusd+vmulps",   "vpdpbusd+vfmadd",  "vpdpbusd+vaddps",
                                 "vpdpbusd+vpermb",   "vscalefps",        "vpdpbusd+vscalefps",
                                 "vpdpbusd m32{1to16}", "vpdpbusd m512"};

// Args: mix (0-8, kMixNames). items/s: instructions per second.
void BM_VectorPorts(benchmark::State& state) {
  const CpuFeatures& cpu = cpu_features();
  if (!cpu.avx512f || !cpu.avx512vnni || !cpu.avx512vbmi) {
    return state.SkipWithError("needs AVX-512 VNNI and VBMI");
  }
  const int mix = static_cast<int>(state.range(0));
  constexpr int64_t kIterations = 1 << 20;
  int per_iteration = 0;
  for (auto _ : state) per_iteration = run_mix(mix, kIterations);
  state.SetItemsProcessed(state.iterations() * kIterations * per_iteration);
  state.SetLabel(kMixNames[mix]);
}
BENCHMARK(BM_VectorPorts)->ArgName("mix")->DenseRange(0, 10)->UseRealTime();

}  // namespace
}  // namespace baton
