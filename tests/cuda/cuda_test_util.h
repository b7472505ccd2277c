// Helpers of the GPU tests: skipping without a device, fresh random bf16 data (the seed is
// printed with any failure), device buffers from the default arena, poisoned outputs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "h3rt/formats.h"

#define H3RT_REQUIRE_GPU()                                                        \
  do {                                                                            \
    if (!::h3rt::cuda::cuda_device_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

namespace h3rt::test {

// A fresh seed per call (std::random_device), recorded in the test's trace.
inline uint64_t fresh_seed() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

// bf16 values as bits (device upload) and as floats (CPU reference input).
struct Bf16Data {
  std::vector<uint16_t> bits;
  std::vector<float> f;
};

inline Bf16Data random_bf16(size_t n, std::mt19937_64& g, float mean, float sd) {
  std::normal_distribution<float> d(mean, sd);
  Bf16Data r;
  r.bits.resize(n);
  r.f.resize(n);
  for (size_t i = 0; i < n; ++i) {
    r.bits[i] = f32_to_bf16(d(g));
    r.f[i] = bf16_to_f32(r.bits[i]);
  }
  return r;
}

// Each row scaled by its own factor (real activations have very different row norms).
inline Bf16Data random_rows_bf16(int64_t rows, int64_t cols, std::mt19937_64& g) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::uniform_real_distribution<float> lg(-3.0f, 3.0f);
  Bf16Data r;
  r.bits.resize(rows * cols);
  r.f.resize(rows * cols);
  for (int64_t i = 0; i < rows; ++i) {
    const float s = std::exp(lg(g));
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t k = i * cols + j;
      r.bits[k] = f32_to_bf16(d(g) * s);
      r.f[k] = bf16_to_f32(r.bits[k]);
    }
  }
  return r;
}

// A device buffer (arena-backed tensor) of `bytes`, poisoned with 0xff bytes (bf16 NaN).
inline Tensor device_buffer(DType dt, Shape shape, bool poison = true) {
  Tensor t = cuda::device_empty(dt, std::move(shape));
  if (poison && t.nbytes() > 0) H3RT_CUDA_CHECK(cudaMemset(t.data(), 0xff, t.nbytes()));
  return t;
}

template <typename T>
inline Tensor upload(const std::vector<T>& v, DType dt, Shape shape) {
  Tensor t = cuda::device_empty(dt, std::move(shape));
  H3RT_CHECK(static_cast<int64_t>(v.size() * sizeof(T)) == t.nbytes(), "upload: size mismatch");
  if (!v.empty())
    H3RT_CUDA_CHECK(cudaMemcpy(t.data(), v.data(), t.nbytes(), cudaMemcpyHostToDevice));
  return t;
}

template <typename T>
inline std::vector<T> download(const Tensor& t) {
  std::vector<T> v(t.nbytes() / sizeof(T));
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  if (!v.empty())
    H3RT_CUDA_CHECK(cudaMemcpy(v.data(), t.data(), t.nbytes(), cudaMemcpyDeviceToHost));
  return v;
}

template <typename T>
inline T* dptr(const Tensor& t) {
  return static_cast<T*>(t.data());
}

// Compares device bf16 bits with CPU floats that must be bf16 values: counts elements whose
// bits differ and the largest distance in bf16 ulps (ordered-integer distance).
struct BitCompare {
  int64_t mismatches = 0;
  int64_t max_ulp = 0;
  int64_t first_bad = -1;
};

inline int32_t bf16_ordered(uint16_t b) {
  return (b & 0x8000) ? -static_cast<int32_t>(b & 0x7fff) : static_cast<int32_t>(b);
}

inline BitCompare compare_bf16(const std::vector<uint16_t>& got, const float* want, size_t n) {
  BitCompare c;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t w = f32_to_bf16(want[i]);
    if (got[i] == w) continue;
    if (c.first_bad < 0) c.first_bad = static_cast<int64_t>(i);
    ++c.mismatches;
    const int64_t d = std::abs(int64_t(bf16_ordered(got[i])) - bf16_ordered(w));
    c.max_ulp = std::max(c.max_ulp, d);
  }
  return c;
}

// Max and mean absolute difference of `got` against `ref` (same length), every got value finite:
// the measure of the GPU-forward-against-CPU tests.
struct Err {
  double max_abs = 0, mean_abs = 0;
};

template <typename Got, typename Ref>
Err error(const Got& got, const Ref& ref) {
  Err e;
  EXPECT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    const double d = std::fabs(double(got[i]) - double(ref[i]));
    EXPECT_TRUE(std::isfinite(got[i]));
    e.max_abs = std::max(e.max_abs, d);
    e.mean_abs += d / ref.size();
  }
  return e;
}

// Two device tensors hold the same bytes (the fused producers' tests: q, scales, bf16 outputs).
inline void expect_same_bytes(const Tensor& a, const Tensor& b, const std::string& what) {
  const auto va = download<uint8_t>(a), vb = download<uint8_t>(b);
  ASSERT_EQ(va.size(), vb.size()) << what;
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < va.size(); ++i)
    if (va[i] != vb[i] && bad++ == 0) first = int64_t(i);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " bytes differ, first at byte " << first;
}

}  // namespace h3rt::test
