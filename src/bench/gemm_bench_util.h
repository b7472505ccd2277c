// Helpers of the GPU benchmarks (bench nvfp4-gemm, int8-gemm, gemm-algos, ...): a device buffer
// freed at scope exit, a CUDA-event timer of single launches, the run's device and stream, and
// the reports' date.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "cuda/runtime.h"
#include "ops/linear/linear.h"

namespace h3rt::bench {

// A device allocation (at least 16 bytes) freed at scope exit.
struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) { H3RT_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

struct Timer {
  cudaStream_t s;
  cudaEvent_t e0, e1;
  int warmup, iters;
  // Median and best ms of `launch` (each call timed alone).
  template <typename F>
  std::pair<double, double> time(F&& launch) {
    for (int i = 0; i < warmup; ++i) launch();
    std::vector<float> ms;
    for (int i = 0; i < iters; ++i) {
      H3RT_CUDA_CHECK(cudaEventRecord(e0, s));
      launch();
      H3RT_CUDA_CHECK(cudaEventRecord(e1, s));
      H3RT_CUDA_CHECK(cudaEventSynchronize(e1));
      float t = 0;
      H3RT_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return {ms[ms.size() / 2], ms.front()};
  }
};

// The current device's properties, a non-blocking stream and a Timer on it, for one benchmark
// run; released at scope exit.
struct BenchContext {
  cudaDeviceProp prop{};
  cudaStream_t st = nullptr;
  Timer tm{};
  BenchContext(int warmup, int iters) {
    int dev = 0;
    H3RT_CUDA_CHECK(cudaGetDevice(&dev));
    H3RT_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    H3RT_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    tm = Timer{st, nullptr, nullptr, warmup, iters};
    H3RT_CUDA_CHECK(cudaEventCreate(&tm.e0));
    H3RT_CUDA_CHECK(cudaEventCreate(&tm.e1));
  }
  ~BenchContext() {
    cudaEventDestroy(tm.e0);
    cudaEventDestroy(tm.e1);
    cudaStreamDestroy(st);
  }
  BenchContext(const BenchContext&) = delete;
  BenchContext& operator=(const BenchContext&) = delete;
};

// q [rows, cols] e4m3 = x [rows, cols] bf16 / *scale (the fp8 GEMMs' activation quantizer).
inline void quantize_e4m3(const DevBuf& x, int64_t rows, int64_t cols, const DevBuf& q,
                          const float* scale, cudaStream_t st) {
  ops::QuantizeE4m3CudaParams p;
  p.x = x.as<__nv_bfloat16>();
  p.q = q.as<__nv_fp8_e4m3>();
  p.scale = scale;
  p.rows = rows;
  p.cols = cols;
  H3RT_CUDA_CHECK(ops::quantize_e4m3_cuda(p, st));
}

// Now, in UTC, as the reports write their date ("2026-12-05T01:23:45Z").
inline std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return date;
}

}  // namespace h3rt::bench
#endif  // H3RT_HAVE_CUDA
