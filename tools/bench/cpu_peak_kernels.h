// The instruction loops behind cpu_peak.h, one per ISA file
// (cpu_peak_avx2.cc, cpu_peak_avx512.cc, cpu_peak_avx512bf16.cc, compiled
// with those flags only; tools/CMakeLists.txt). Each runs `iterations` rounds
// of kPeakAccumulators independent accumulator chains in registers, one
// instruction (or, for AVX2 int8, one maddubs+madd+add triple) per chain per
// round, and returns the sum of every lane of every accumulator, so a caller
// (and the tests) can check that exactly iterations x kPeakAccumulators
// steps ran: a step adds a fixed amount to each lane, given below.
#pragma once

#include <cstdint>

namespace baton::cli::peak_kernels {

// Independent chains: more than latency x issue ports of every unit measured
// (vpdpbusd / vfmadd / vdpbf16ps: ~4-5 cycles, 2 ports), so throughput, not
// latency, bounds the loop. 16 accumulators + 2 inputs fit the 32 zmm.
inline constexpr int kPeakAccumulators = 16;
// AVX2 has 16 ymm registers: 12 FMA chains + 2 inputs; the int8 triple needs
// a temporary and a vector of ones too, so 8 chains there.
inline constexpr int kPeakAccumulatorsAvx2Fma = 12;
inline constexpr int kPeakAccumulatorsAvx2Int8 = 8;

// vpdpbusd zmm: 16 int32 lanes, each += sum of 4 u8 x s8 products = 64 MACs
// (128 ops) per instruction. Every byte of the first operand is `a`, of the
// second `b`: a lane gains 4 * a * b per step (int32, wrapping).
int64_t int8_dot_avx512(int64_t iterations, uint8_t a, int8_t b);
// vdpbf16ps zmm: 16 f32 lanes, each += 2 bf16 products = 32 MACs (64 flops)
// per instruction; a lane gains 2 * a * b per step (a, b rounded to bf16).
double bf16_dot_avx512bf16(int64_t iterations, float a, float b);
// vfmadd231ps zmm: 16 f32 lanes, 16 MACs (32 flops); a lane gains a * b.
double f32_fma_avx512(int64_t iterations, float a, float b);

// The Q4_0 prefill block step of 2 strips x 6 tokens (96 vpdpbusd zmm =
// 12288 ops, their x broadcasts and weight loads, and the block scales'
// convert, multiply and FMA per strip and token), in L1, run `iterations`
// times: the ceiling of the packed kernel's instruction mix, for the
// microbenchmark beside the vpdpbusd peak. kUnpackedPanel: as the prefill
// kernel (weights unpacked once per chunk); kPackedNibbles: as the decode
// kernel (an and, a shift and an and per 64 bytes of nibbles, every step);
// kDotProductsOnly: kUnpackedPanel without the scales' three instructions
// (the int32 sums added as raw bits); kNoScaleMultiply: kUnpackedPanel
// with the FMA by the weight scale alone (no multiply by the x scale per
// strip and token). Weight bytes `nibble` (0..15), x
// quants 1, scales 1: returns the sum of the 12 accumulators' lanes, 12 x 16
// x 32 x nibble x iterations for the three scaled mixes (exact while it stays
// under 2^24 per lane).
enum class BlockStepMix { kUnpackedPanel, kPackedNibbles, kDotProductsOnly, kNoScaleMultiply };
double q4_0_block_steps_avx512(int64_t iterations, BlockStepMix mix, uint8_t nibble);

// vpmaddubsw + vpmaddwd (by ones) + vpaddd on ymm: 8 int32 lanes, each += 4
// u8 x s8 products = 32 MACs (64 ops) per triple; a lane gains 4 * a * b
// (|2 a b| must fit int16: maddubsw saturates).
int64_t int8_dot_avx2(int64_t iterations, uint8_t a, int8_t b);
// vfmadd231ps ymm: 8 f32 lanes, 8 MACs (16 flops); a lane gains a * b.
double f32_fma_avx2(int64_t iterations, float a, float b);

}  // namespace baton::cli::peak_kernels
