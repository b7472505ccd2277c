// Float32 arithmetic with one IEEE round-to-nearest-even rounding per operation, identical on
// the host and on CUDA devices. Compilers may otherwise fuse a*b+c into one FMA (nvcc does by
// default, GCC does with -ffp-contract=fast, its GNU-mode default on FMA targets), which changes
// the last bit. On the device the _rn intrinsics are never fused; on the host the product
// passes through a volatile, which forces its rounding and hides it from contraction.
// +, -, * and / on float are correctly rounded on both sides (FLT_EVAL_METHOD 0 targets).
#pragma once

#include <cmath>

#include "core/host_device.h"

namespace h3rt::fp {

H3RT_HD inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  volatile float p = a * b;
  return p;
#endif
}

H3RT_HD inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

H3RT_HD inline float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

H3RT_HD inline float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

H3RT_HD inline float sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);  // IEEE requires a correctly rounded square root
#endif
}

}  // namespace h3rt::fp
