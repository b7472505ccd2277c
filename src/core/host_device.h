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

// SplitMix64's output function: the hash behind the synthetic weights (host and device give the
// same bits) and the hybrid's seeded sampling.
H3RT_HD inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

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

// x rounded to bf16 (nearest even) as bits in the low half, as h3rt::f32_to_bf16 gives them (a NaN
// is quieted).
H3RT_HD inline uint32_t bf16_bits_rne(float x) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return ((u >> 16) | 0x40u) & 0xffffu;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

}  // namespace h3rt
