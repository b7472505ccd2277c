// NVFP4 quantize benchmark (see nvfp4_quantize_bench.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/bench_data.h"
#include "bench/gemm_bench_util.h"
#include "bench/nvfp4_quantize_bench.h"
#include "cuda/runtime.h"
#include "formats/nvfp4_quantize.h"
#include "formats/nvfp4_quantize_kernels.cuh"
#include "h3rt/check.h"
#include "h3rt/report.h"

namespace h3rt::bench {
namespace {

struct Variant {
  const char* name;
  Nvfp4GlobalScaleSource source;
  Nvfp4Math math;
  bool force_sw;
  int reads;            // passes over the input
  bool legacy = false;  // the previous kernel and encoder (A/B; software-cvt path only)
};

}  // namespace

int run_nvfp4_quantize_bench(const Nvfp4BenchOptions& o) {
  cuda::require_cuda_device("bench quantize-nvfp4");
  H3RT_CHECK(o.rows > 0 && o.cols > 0 && o.cols % 16 == 0 && o.buffers >= 1 && o.iters >= 1,
             "nvfp4 bench: bad options (cols must be a multiple of 16)");
  int dev = 0;
  cudaDeviceProp prop{};
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  H3RT_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  const int64_t n = o.rows * o.cols;
  const size_t in_bytes = n * 2, q_bytes = n / 2,
               s_bytes = static_cast<size_t>(nvfp4_scales_bytes(o.rows, o.cols));
  std::vector<void*> xs(o.buffers);
  for (int b = 0; b < o.buffers; ++b) {
    H3RT_CUDA_CHECK(cudaMalloc(&xs[b], in_bytes));
    fill_hashed_bf16(xs[b], n, o.cols, 4.0f, true, 1234567ull * (b + 1), nullptr);
  }
  void *q = nullptr, *s = nullptr, *g = nullptr, *ws = nullptr, *copy = nullptr;
  H3RT_CUDA_CHECK(cudaMalloc(&q, q_bytes));
  H3RT_CUDA_CHECK(cudaMalloc(&s, s_bytes));
  H3RT_CUDA_CHECK(cudaMalloc(&g, sizeof(float)));
  H3RT_CUDA_CHECK(cudaMalloc(&ws, nvfp4_quantize_workspace_bytes()));
  H3RT_CUDA_CHECK(cudaMalloc(&copy, in_bytes));
  H3RT_CUDA_CHECK(cudaMemset(ws, 0, nvfp4_quantize_workspace_bytes()));
  const float one = 1.0f;
  H3RT_CUDA_CHECK(cudaMemcpy(g, &one, sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t st;
  H3RT_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  H3RT_CUDA_CHECK(cudaEventCreate(&e0));
  H3RT_CUDA_CHECK(cudaEventCreate(&e1));

  auto time_it = [&](auto&& launch) {
    for (int i = 0; i < o.warmup; ++i) launch(i % o.buffers);
    std::vector<float> ms;
    for (int i = 0; i < o.iters; ++i) {
      H3RT_CUDA_CHECK(cudaEventRecord(e0, st));
      launch(i % o.buffers);
      H3RT_CUDA_CHECK(cudaEventRecord(e1, st));
      H3RT_CUDA_CHECK(cudaEventSynchronize(e1));
      float t = 0;
      H3RT_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
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
      {"given_g_legacy", Nvfp4GlobalScaleSource::kGiven, Nvfp4Math::kIeee, true, 1, true},
      {"given_g_fast_math_legacy", Nvfp4GlobalScaleSource::kGiven, Nvfp4Math::kFastMath, true, 1,
       true},
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
      H3RT_CUDA_CHECK(nvfp4_detail::quantize_with_encoder(p, v.legacy, st));
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
  // A/B sanity: the new and the legacy encoder give the same bytes on the first input.
  auto run_bytes = [&](bool legacy) {
    Nvfp4QuantizeParams p;
    p.x = xs[0];
    p.rows = o.rows;
    p.cols = p.ld = o.cols;
    p.qdata = static_cast<uint8_t*>(q);
    p.scales = static_cast<uint8_t*>(s);
    p.global_scale = static_cast<float*>(g);
    p.force_software_cvt = true;
    H3RT_CUDA_CHECK(cudaMemsetAsync(q, 0xff, q_bytes, st));
    H3RT_CUDA_CHECK(cudaMemsetAsync(s, 0xff, s_bytes, st));
    H3RT_CUDA_CHECK(nvfp4_detail::quantize_with_encoder(p, legacy, st));
    std::vector<uint8_t> out(q_bytes + s_bytes);
    H3RT_CUDA_CHECK(cudaMemcpyAsync(out.data(), q, q_bytes, cudaMemcpyDeviceToHost, st));
    H3RT_CUDA_CHECK(cudaMemcpyAsync(out.data() + q_bytes, s, s_bytes, cudaMemcpyDeviceToHost, st));
    H3RT_CUDA_CHECK(cudaStreamSynchronize(st));
    return out;
  };
  const std::vector<uint8_t> new_bytes = run_bytes(false), old_bytes = run_bytes(true);
  size_t differ = 0;
  for (size_t i = 0; i < new_bytes.size(); ++i) differ += new_bytes[i] != old_bytes[i];
  std::printf("  new vs legacy encoder (software cvt, given g = 1): %zu of %zu bytes differ\n",
              differ, new_bytes.size());
  // Reference point: a device-to-device copy of one input (reads + writes in_bytes each).
  auto [cmed, cbest] = time_it([&](int b) {
    H3RT_CUDA_CHECK(cudaMemcpyAsync(copy, xs[b], in_bytes, cudaMemcpyDeviceToDevice, st));
  });
  std::printf("  %-22s median %.4f ms  best %.4f ms  %7.1f GB/s (read+write)\n", "d2d_copy", cmed,
              cbest, 2.0 * in_bytes / (cmed * 1e-3) / 1e9);
  if (!o.json_path.empty()) {
    const std::string date = utc_date();
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
         {"new_vs_legacy_differing_bytes", differ},
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
