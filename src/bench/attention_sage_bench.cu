// Sage attention benchmark (see attention_sage_bench.h). Input: synthetic bf16 QKV rows
// [S][3*H*128] (the strided layout the model produces), values ~N(0,1) from a hash.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/attention_sage_bench.h"
#include "h3rt/check.h"
#include "ops/attention_sage/attention_sage.h"
#include "ops/attention_sage/attention_sage_cuda.h"

namespace h3rt::bench {
namespace {

#define BENCH_CUDA(x)                                                                     \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    H3RT_CHECK(e_ == cudaSuccess, "attention bench: ", #x, ": ", cudaGetErrorString(e_)); \
  } while (0)

__device__ float hash_normal(uint64_t i) {
  // Sum of four uniform hashes, scaled to unit variance: close enough to N(0,1) for timing.
  float s = 0.0f;
  for (int k = 0; k < 4; ++k) {
    uint64_t x = (i * 4 + k) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    s += static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
  }
  return (s - 2.0f) * 1.7320508f;
}

__global__ void fill_kernel(__nv_bfloat16* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(hash_normal(i));
}

template <typename F>
double median_ms(int warmup, int iters, F&& f) {
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) f();
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    BENCH_CUDA(cudaEventRecord(a));
    f();
    BENCH_CUDA(cudaEventRecord(b));
    BENCH_CUDA(cudaEventSynchronize(b));
    float t = 0;
    BENCH_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int run_attention_bench(const AttentionBenchOptions& opt) {
  using namespace h3rt::attention_sage;
  H3RT_CHECK(opt.seq > 0 && opt.heads > 0 && opt.iters > 0, "attention bench: bad options");
  const int64_t S = opt.seq, H = opt.heads, stride = 3 * H * kHeadDim;
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  void *qkv = nullptr, *buf = nullptr, *out = nullptr;
  const size_t buf_bytes = sage_buffer_bytes(S, H);
  BENCH_CUDA(cudaMalloc(&qkv, S * stride * 2));
  BENCH_CUDA(cudaMalloc(&buf, buf_bytes));
  BENCH_CUDA(cudaMalloc(&out, S * H * kHeadDim * 2));
  BENCH_CUDA(cudaMemset(buf, 0, buf_bytes));
  fill_kernel<<<4096, 256>>>(static_cast<__nv_bfloat16*>(qkv), S * stride);
  BENCH_CUDA(cudaGetLastError());
  SageBuffers b = sage_buffers(buf, S, H);
  SagePrepassParams pp{qkv, stride, S, H, 1.0f / std::sqrt(float(kHeadDim)), b};
  auto prepass = [&] { BENCH_CUDA(sage_prepass(pp, nullptr)); };
  const double flops = 4.0 * double(S) * double(S) * kHeadDim * double(H);
  const double pre_ms = median_ms(opt.warmup, opt.iters, prepass);
  const double in_bytes = double(S) * stride * 2;
  std::printf("device: %s (sm_%d%d)  S=%lld heads=%lld  QKV row stride %lld (strided q/k/v)\n",
              prop.name, prop.major, prop.minor, static_cast<long long>(S),
              static_cast<long long>(H), static_cast<long long>(stride));
  std::printf("pre-pass: %.3f ms (2 launches; QKV bf16 %.2f GB)\n", pre_ms, in_bytes / 1e9);
  nlohmann::json j = {{"device", prop.name},  {"seq", S},       {"heads", H},
                      {"prepass_ms", pre_ms}, {"flops", flops}, {"warmup", opt.warmup},
                      {"iters", opt.iters}};
  for (SageVariant v : {SageVariant::w4, SageVariant::w8}) {
    SageAttentionParams ap{b, S, H, out, H * kHeadDim, v};
    auto attn = [&] { BENCH_CUDA(sage_attention(ap, nullptr)); };
    const double ms = median_ms(opt.warmup, opt.iters, attn);
    const char* name = v == SageVariant::w4 ? "w4" : "w8";
    std::printf("kernel %s: %.3f ms  %.1f TFLOP/s | with pre-pass %.3f ms  %.1f TFLOP/s\n", name,
                ms, flops / ms / 1e9, ms + pre_ms, flops / (ms + pre_ms) / 1e9);
    j["kernel_ms"][name] = ms;
    j["total_ms"][name] = ms + pre_ms;
  }
  BENCH_CUDA(cudaDeviceSynchronize());
  cudaFree(qkv);
  cudaFree(buf);
  cudaFree(out);
  if (!opt.json_path.empty()) {
    std::ofstream f(opt.json_path);
    H3RT_CHECK(f.good(), "attention bench: cannot write ", opt.json_path);
    f << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace h3rt::bench
