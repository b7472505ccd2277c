// Device helpers shared by the memory-bound kernels: 16-byte vectors of 8 bf16 values, exact
// bf16 rounding points, and block reductions. Arithmetic that the CPU reference performs as
// separate float32 operations uses __fmul_rn/__fadd_rn so nvcc cannot contract it into an FMA
// (which would change the rounding and break bit-exactness).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace h3rt::cuda {

struct alignas(16) Bf16x8 {
  __nv_bfloat162 h[4];
};

__device__ __forceinline__ Bf16x8 load8(const __nv_bfloat16* p) {
  uint4 u = *reinterpret_cast<const uint4*>(p);
  return *reinterpret_cast<Bf16x8*>(&u);
}

// Streaming load for data read once (keeps L2 for data that is reused).
__device__ __forceinline__ Bf16x8 load8_stream(const __nv_bfloat16* p) {
  uint4 u = __ldcs(reinterpret_cast<const uint4*>(p));
  return *reinterpret_cast<Bf16x8*>(&u);
}

__device__ __forceinline__ void store8(__nv_bfloat16* p, const Bf16x8& v) {
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&v);
}

__device__ __forceinline__ void unpack8(const Bf16x8& v, float (&f)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 t = __bfloat1622float2(v.h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

__device__ __forceinline__ Bf16x8 pack8(const float (&f)[8]) {
  Bf16x8 v;
#pragma unroll
  for (int i = 0; i < 4; ++i) v.h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

// Predicated 16-byte loads (zeros when pred is false), written as one predicated instruction:
// a load placed after a branch is not hoisted above it, so a guard between two loads would
// serialize their memory latencies. Issue every load of a phase before the first use.
__device__ __forceinline__ uint4 load_u4(const __nv_bfloat16* p, bool pred) {
  uint4 u;
  asm("{\n .reg .pred q;\n setp.ne.b32 q, %5, 0;\n"
      " mov.b32 %0, 0; mov.b32 %1, 0; mov.b32 %2, 0; mov.b32 %3, 0;\n"
      " @q ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n}"
      : "=&r"(u.x), "=&r"(u.y), "=&r"(u.z), "=&r"(u.w)
      : "l"(p), "r"(static_cast<int>(pred)));
  return u;
}

// Streaming variant (evict-first) for data read once.
__device__ __forceinline__ uint4 load_u4_stream(const __nv_bfloat16* p, bool pred) {
  uint4 u;
  asm("{\n .reg .pred q;\n setp.ne.b32 q, %5, 0;\n"
      " mov.b32 %0, 0; mov.b32 %1, 0; mov.b32 %2, 0; mov.b32 %3, 0;\n"
      " @q ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];\n}"
      : "=&r"(u.x), "=&r"(u.y), "=&r"(u.z), "=&r"(u.w)
      : "l"(p), "r"(static_cast<int>(pred)));
  return u;
}

// Element e (0..7) of 8 packed bf16 values, as a float (exact; no conversion instruction).
__device__ __forceinline__ float bf16_elem(const uint4& u, int e) {
  const uint32_t w = e < 2 ? u.x : e < 4 ? u.y : e < 6 ? u.z : u.w;
  return __uint_as_float((e & 1) ? (w & 0xffff0000u) : (w << 16));
}

__device__ __forceinline__ void unpack_u4(const uint4& u, float (&f)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) f[e] = bf16_elem(u, e);
}

// Round 8 floats to bf16 (RNE) and pack them.
__device__ __forceinline__ uint4 pack_u4(const float (&f)[8]) {
  const Bf16x8 v = pack8(f);
  return *reinterpret_cast<const uint4*>(&v);
}

// One 16-byte store (a struct assembled under conditions may otherwise be split into four).
__device__ __forceinline__ void store_u4(__nv_bfloat16* p, const uint4& u) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(u.x), "r"(u.y), "r"(u.z),
               "r"(u.w)
               : "memory");
}

// round_bf16 of the host (RNE), as a float. Packing (0, x) puts bf16(x) in the high half, which
// is then the float's bit pattern: one F2FP (ALU) instead of a conversion-unit F2F plus a shift
// (the F2F path's 16/clk/SM throughput bounded the elementwise kernels).
__device__ __forceinline__ float rbf(float x) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(0.0f, x);
  return __uint_as_float(*reinterpret_cast<const uint32_t*>(&h));
}

// Two floats rounded to bf16 (RNE) and packed into one word, lo in the low half (element order
// of a 16-byte vector): one F2FP for two values.
__device__ __forceinline__ uint32_t pack_bf2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Packed bf16x2 product and sum, each rounded once (RNE) from the exact result. With bf16
// operands these equal the reference's float32 op followed by round_bf16: a product of two bf16
// values is exact in float32, and for a sum the float32 intermediate (24 bits >= 2 x 8 + 2)
// makes the double rounding innocuous. Explicit .rn keeps the pair from being fused into an FMA.
__device__ __forceinline__ uint32_t bf2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));  // + -0
#endif
  return d;
}

__device__ __forceinline__ uint32_t bf2_add(uint32_t a, uint32_t b) {
  uint32_t d;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(0x3f803f80u), "r"(b));  // a*1 + b
#endif
  return d;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024). Every thread gets the result.
template <typename T>
__device__ __forceinline__ T block_sum(T v) {
  __shared__ T partial[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  v = warp_sum(v);
  __syncthreads();  // protects `partial` against a previous call's readers
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int nwarps = blockDim.x >> 5;
  T t = lane < nwarps ? partial[lane] : T(0);
  return warp_sum(t);
}

}  // namespace h3rt::cuda
