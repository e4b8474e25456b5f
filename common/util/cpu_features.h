// What the CPU we run on can execute, and which SIMD level the kernels use.
// Kernels are compiled per ISA (files *_avx2.cc / *_avx512.cc) and entered only
// after these checks, so one binary runs on any x86-64.
#pragma once

namespace baton {

// Instruction-set extensions the CPU reports AND the OS has enabled register
// state for (xgetbv): an AVX-512 flag is false when the OS does not save zmm.
struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512vbmi = false;  // vpermb; not part of any SimdLevel: checked on its own (kv_kernels.h q8_value_quads_active)
  bool avx_vnni = false;
  bool avx512bf16 = false;  // not part of any SimdLevel: checked on its own (FloatMatmul::kBf16)
  // AMX-TILE and AMX-INT8 reported, and the OS saves tile state (XCR0 bits
  // 17 and 18). Not part of any SimdLevel; a process must still ask Linux
  // for the tile data state before its first tile instruction
  // (amx_int8_usable).
  bool amx_int8 = false;
  // The vendor string (CPUID leaf 0) is "AuthenticAMD": the packed Q4_0
  // decode kernel's software prefetch differs by vendor (matmul.cc
  // set_packed_prefetch).
  bool amd = false;
};

// Detected once, on first use.
const CpuFeatures& cpu_features();

// A process-wide tri-state kernel switch (set_packed_near_nta,
// set_packed_load_ahead, set_packed_two_streams,
// set_attention_prefetch_nta): 1 on, 0 off, -1 the
// vendor's default, which for these is on where the CPU is AMD's.
inline bool switch_or_amd_default(int setting) { return setting >= 0 ? setting != 0 : cpu_features().amd; }

// True when this process may run AMX-INT8 tile instructions: the CPU and OS
// have them (CpuFeatures::amx_int8), Linux granted the process the tile data
// state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once, on first use), and the
// environment variable BATON_AMX is not "0".
bool amx_int8_usable();

// Ordered: a higher level may use everything a lower one does.
// kAvx2 = AVX2 + FMA + F16C; kAvx512 = kAvx2 + AVX-512 F/BW/VL/DQ/VNNI.
enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// The highest level this CPU (and OS) supports.
SimdLevel best_simd_level();
// The level dispatched kernels use: best_simd_level(), lowered by the
// environment variable BATON_SIMD=scalar|avx2|avx512 (never raised above best).
// Read once, on first use.
SimdLevel active_simd_level();
// The level a BATON_SIMD value asks for, clamped to `best`; nullptr or an empty
// or unknown value (logged as a warning) gives `best`.
SimdLevel simd_level_for_request(const char* requested, SimdLevel best);
// "scalar", "avx2", "avx512".
const char* simd_level_name(SimdLevel level);

}  // namespace baton
