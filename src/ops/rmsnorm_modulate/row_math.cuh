// Row arithmetic of rmsnorm_modulate's kernel (cuda.cu): the sum of squares, 1 / rms and the
// modulation of 8 packed values, each step rounded as the CPU reference rounds it.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/device_math.cuh"

namespace h3rt::ops::rmsnorm_math {

// This thread's part of a row's sum of squares, in double (squares of bf16 values are exact, so
// the sum does not depend on the order) over two chains.
template <int kVec>
__device__ __forceinline__ double sum_squares(const uint4 (&xv)[kVec]) {
  double ss[2] = {0.0, 0.0};
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const double v = cuda::bf16_elem(xv[i], e);
      ss[e & 1] = fma(v, v, ss[e & 1]);
    }
  }
  return ss[0] + ss[1];
}

// 1 / sqrt(mean + eps) from the row's sum of squares, rounded as the CPU reference does.
__device__ __forceinline__ float inv_rms(double sum, int64_t dim, float eps) {
  const float mean = static_cast<float>(__ddiv_rn(sum, static_cast<double>(dim)));
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

// y = round(round(n * round(1 + scale)) + shift), n = round(x * inv * w), on 8 packed values:
// the kernel's bf16-output path.
template <bool kModulate>
__device__ __forceinline__ uint4 modulate8(const uint4& x, float inv, const uint4& w, bool has_w,
                                           const uint4& sh, const uint4& sc) {
  float n[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float wf = has_w ? cuda::bf16_elem(w, e) : 1.0f;
    n[e] = __fmul_rn(__fmul_rn(cuda::bf16_elem(x, e), inv), wf);
  }
  uint4 y = make_uint4(cuda::pack_bf2(n[0], n[1]), cuda::pack_bf2(n[2], n[3]),
                       cuda::pack_bf2(n[4], n[5]), cuda::pack_bf2(n[6], n[7]));
  if constexpr (kModulate) {
    const uint32_t one = 0x3f803f80u;
    y = make_uint4(cuda::bf2_add(cuda::bf2_mul(y.x, cuda::bf2_add(one, sc.x)), sh.x),
                   cuda::bf2_add(cuda::bf2_mul(y.y, cuda::bf2_add(one, sc.y)), sh.y),
                   cuda::bf2_add(cuda::bf2_mul(y.z, cuda::bf2_add(one, sc.z)), sh.z),
                   cuda::bf2_add(cuda::bf2_mul(y.w, cuda::bf2_add(one, sc.w)), sh.w));
  }
  return y;
}

}  // namespace h3rt::ops::rmsnorm_math
