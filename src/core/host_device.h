// Code shared verbatim by host and device: the H3RT_HD qualifier and float <-> bit casts.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define H3RT_HD __host__ __device__
#else
#define H3RT_HD
#endif

namespace h3rt {

H3RT_HD inline uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

H3RT_HD inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

}  // namespace h3rt
