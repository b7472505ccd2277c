// Helpers of the GEMM benchmarks (bench nvfp4-gemm, bench int8-gemm): a device buffer freed at
// scope exit and a CUDA-event timer of single launches.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "cuda/runtime.h"

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

}  // namespace h3rt::bench
#endif  // H3RT_HAVE_CUDA
