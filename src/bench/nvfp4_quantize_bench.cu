// NVFP4 quantize benchmark (see nvfp4_quantize_bench.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/nvfp4_quantize_bench.h"
#include "formats/nvfp4_quantize.h"
#include "h3rt/check.h"
#include "h3rt/report.h"

namespace h3rt::bench {
namespace {

#define NVB_CUDA(x)                                                                   \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    H3RT_CHECK(e_ == cudaSuccess, "nvfp4 bench: ", #x, ": ", cudaGetErrorString(e_)); \
  } while (0)

// Synthetic activations: hashed values ~ U(-4, 4) times a per-row factor in [0.25, 4].
__global__ void fill_kernel(uint16_t* x, int64_t n, int64_t cols, uint64_t salt) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t h = (uint64_t(i) + salt) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    const uint64_t r = uint64_t(i / cols) * 0x94D049BB133111EBull + salt;
    const float row = 0.25f + 3.75f * float((r >> 40) & 0xffff) / 65535.0f;
    const float v = (float(h >> 40) * (1.0f / 16777216.0f) * 8.0f - 4.0f) * row;
    x[i] = uint16_t(__float_as_uint(v) >> 16);
  }
}

struct Variant {
  const char* name;
  Nvfp4GlobalScaleSource source;
  Nvfp4Math math;
  bool force_sw;
  int reads;  // passes over the input
};

}  // namespace

int run_nvfp4_quantize_bench(const Nvfp4BenchOptions& o) {
  H3RT_CHECK(o.rows > 0 && o.cols > 0 && o.cols % 16 == 0 && o.buffers >= 1 && o.iters >= 1,
             "nvfp4 bench: bad options (cols must be a multiple of 16)");
  int dev = 0;
  cudaDeviceProp prop{};
  NVB_CUDA(cudaGetDevice(&dev));
  NVB_CUDA(cudaGetDeviceProperties(&prop, dev));
  const int64_t n = o.rows * o.cols;
  const size_t in_bytes = n * 2, q_bytes = n / 2,
               s_bytes = static_cast<size_t>(nvfp4_scales_bytes(o.rows, o.cols));
  std::vector<void*> xs(o.buffers);
  for (int b = 0; b < o.buffers; ++b) {
    NVB_CUDA(cudaMalloc(&xs[b], in_bytes));
    fill_kernel<<<4096, 256>>>(static_cast<uint16_t*>(xs[b]), n, o.cols, 1234567ull * (b + 1));
    NVB_CUDA(cudaGetLastError());
  }
  void *q = nullptr, *s = nullptr, *g = nullptr, *ws = nullptr, *copy = nullptr;
  NVB_CUDA(cudaMalloc(&q, q_bytes));
  NVB_CUDA(cudaMalloc(&s, s_bytes));
  NVB_CUDA(cudaMalloc(&g, sizeof(float)));
  NVB_CUDA(cudaMalloc(&ws, nvfp4_quantize_workspace_bytes()));
  NVB_CUDA(cudaMalloc(&copy, in_bytes));
  NVB_CUDA(cudaMemset(ws, 0, nvfp4_quantize_workspace_bytes()));
  const float one = 1.0f;
  NVB_CUDA(cudaMemcpy(g, &one, sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t st;
  NVB_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  NVB_CUDA(cudaEventCreate(&e0));
  NVB_CUDA(cudaEventCreate(&e1));

  auto time_it = [&](auto&& launch) {
    for (int i = 0; i < o.warmup; ++i) launch(i % o.buffers);
    std::vector<float> ms;
    for (int i = 0; i < o.iters; ++i) {
      NVB_CUDA(cudaEventRecord(e0, st));
      launch(i % o.buffers);
      NVB_CUDA(cudaEventRecord(e1, st));
      NVB_CUDA(cudaEventSynchronize(e1));
      float t = 0;
      NVB_CUDA(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return std::make_pair(ms[ms.size() / 2], ms.front());
  };

  const Variant variants[] = {
      {"given_g", Nvfp4GlobalScaleSource::kGiven, Nvfp4Math::kIeee, false, 1},
      {"two_pass", Nvfp4GlobalScaleSource::kTwoPass, Nvfp4Math::kIeee, false, 2},
      {"single_launch", Nvfp4GlobalScaleSource::kSingleLaunch, Nvfp4Math::kIeee, false, 2},
      {"given_g_fast_math", Nvfp4GlobalScaleSource::kGiven, Nvfp4Math::kFastMath, false, 1},
      {"given_g_software_cvt", Nvfp4GlobalScaleSource::kGiven, Nvfp4Math::kIeee, true, 1},
  };
  const double unique = double(in_bytes + q_bytes + s_bytes);
  nlohmann::json results = nlohmann::json::array();
  std::printf("nvfp4 quantize %lld x %lld bf16 on %s, %d input buffers of %.0f MB\n",
              (long long)o.rows, (long long)o.cols, prop.name, o.buffers, in_bytes / 1e6);
  for (const Variant& v : variants) {
    Nvfp4QuantizeParams p;
    p.rows = o.rows;
    p.cols = p.ld = o.cols;
    p.qdata = static_cast<uint8_t*>(q);
    p.scales = static_cast<uint8_t*>(s);
    p.global_scale = static_cast<float*>(g);
    p.source = v.source;
    p.math = v.math;
    p.force_software_cvt = v.force_sw;
    p.workspace = ws;
    auto [med, best] = time_it([&](int b) {
      p.x = xs[b];
      NVB_CUDA(nvfp4_quantize(p, st));
    });
    const double gbs = unique / (med * 1e-3) / 1e9;
    const double traffic = double(in_bytes) * v.reads + q_bytes + s_bytes;
    std::printf(
        "  %-22s median %.4f ms  best %.4f ms  %7.1f GB/s (unique in+out)  %7.1f GB/s "
        "(traffic, %d input reads)  hw_cvt=%d\n",
        v.name, med, best, gbs, traffic / (med * 1e-3) / 1e9, v.reads,
        int(nvfp4_uses_hardware_cvt(p)));
    results.push_back({{"variant", v.name},
                       {"median_ms", med},
                       {"best_ms", best},
                       {"unique_bytes", unique},
                       {"traffic_bytes", traffic},
                       {"gbps_unique", gbs},
                       {"gbps_traffic", traffic / (med * 1e-3) / 1e9},
                       {"hardware_cvt", nvfp4_uses_hardware_cvt(p)}});
  }
  // Reference point: a device-to-device copy of one input (reads + writes in_bytes each).
  auto [cmed, cbest] = time_it([&](int b) {
    NVB_CUDA(cudaMemcpyAsync(copy, xs[b], in_bytes, cudaMemcpyDeviceToDevice, st));
  });
  std::printf("  %-22s median %.4f ms  best %.4f ms  %7.1f GB/s (read+write)\n", "d2d_copy", cmed,
              cbest, 2.0 * in_bytes / (cmed * 1e-3) / 1e9);
  if (!o.json_path.empty()) {
    const std::time_t now = std::time(nullptr);
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    write_json(
        o.json_path,
        {{"bench", "nvfp4_quantize"},
         {"date", date},
         {"device", prop.name},
         {"rows", o.rows},
         {"cols", o.cols},
         {"buffers", o.buffers},
         {"warmup", o.warmup},
         {"iters", o.iters},
         {"variants", results},
         {"d2d_copy", {{"median_ms", cmed}, {"gbps", 2.0 * in_bytes / (cmed * 1e-3) / 1e9}}}});
  }
  for (void* b : xs) cudaFree(b);
  cudaFree(q);
  cudaFree(s);
  cudaFree(g);
  cudaFree(ws);
  cudaFree(copy);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(st);
  return 0;
}

}  // namespace h3rt::bench
