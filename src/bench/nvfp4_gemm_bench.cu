// NVFP4 GEMM benchmark (see nvfp4_gemm_bench.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_data.h"
#include "bench/gemm_bench_util.h"
#include "bench/nvfp4_gemm_bench.h"
#include "cuda/runtime.h"
#include "formats/nvfp4_quantize.h"
#include "h3rt/check.h"
#include "h3rt/report.h"
#include "ops/linear/linear.h"
#include "ops/linear_nvfp4/linear_nvfp4.h"
#include "ops/linear_nvfp4/nvfp4_dequant.h"

namespace h3rt::bench {
namespace {

struct Shape {
  const char* name;
  int64_t n, k;
};

struct Variant {
  const char* name;
  bool nvfp4_a;  // W4A4 (else W4A16); ignored for bf16
  ops::Nvfp4GemmAlgo algo;
  bool bf16_reference;
};

void quantize(const void* x, int64_t rows, int64_t cols, Nvfp4ScaleRule rule, const DevBuf& q,
              const DevBuf& s, const DevBuf& g, const DevBuf& ws, cudaStream_t st) {
  Nvfp4QuantizeParams p;
  p.x = x;
  p.rows = rows;
  p.cols = p.ld = cols;
  p.qdata = q.as<uint8_t>();
  p.scales = s.as<uint8_t>();
  p.global_scale = g.as<float>();
  p.source = Nvfp4GlobalScaleSource::kTwoPass;
  p.rule = rule;
  p.workspace = ws.p;
  H3RT_CUDA_CHECK(nvfp4_quantize(p, st));
}

}  // namespace

nlohmann::json run_nvfp4_gemm_bench(const Nvfp4GemmBenchOptions& o) {
  cuda::require_cuda_device("bench nvfp4-gemm");
  H3RT_CHECK(o.rows > 0 && o.hidden % 64 == 0 && o.inner % 64 == 0 && o.ffn % 64 == 0 &&
                 o.iters >= 1 && o.warmup >= 0,
             "nvfp4-gemm bench: bad options (hidden, inner and ffn must be multiples of 64)");
  BenchContext ctx(o.warmup, o.iters);
  const cudaDeviceProp& prop = ctx.prop;
  cudaStream_t st = ctx.st;
  Timer& tm = ctx.tm;

  const Shape shapes[] = {{"qkv", 3 * o.inner, o.hidden},
                          {"out", o.hidden, o.inner},
                          {"fc1", 2 * o.ffn, o.hidden},
                          {"fc2", o.hidden, o.ffn}};
  using A = ops::Nvfp4GemmAlgo;
  const Variant variants[] = {
      {"bf16_cublaslt", false, A::kAuto, true},
      {"w4a4_dequant_cublas", true, A::kDequantCublas, false},
      {"w4a16_dequant_cublas", false, A::kDequantCublas, false},
      {"w4a4_block_scaled_sm100", true, A::kBlockScaledSm100, false},
  };
  std::map<std::string, double> total;
  std::map<std::string, bool> complete;
  for (const Variant& v : variants) complete[v.name] = true;
  nlohmann::json shapes_json = nlohmann::json::array();
  const int64_t m = o.rows;
  std::printf("nvfp4 GEMM bench on %s: M = %lld, median of %d after %d warm-up\n", prop.name,
              (long long)m, o.iters, o.warmup);

  DevBuf qws(nvfp4_quantize_workspace_bytes());
  H3RT_CUDA_CHECK(cudaMemsetAsync(qws.p, 0, nvfp4_quantize_workspace_bytes(), st));
  for (const Shape& sh : shapes) {
    const int64_t n = sh.n, k = sh.k;
    DevBuf a16(size_t(m) * k * 2), w16(size_t(n) * k * 2), bias(size_t(n) * 2),
        y(size_t(m) * n * 2);
    DevBuf aq(size_t(m) * k / 2), as(nvfp4_scales_bytes(m, k)), ag(4);
    DevBuf wq(size_t(n) * k / 2), ws(nvfp4_scales_bytes(n, k)), wg(4);
    fill_hashed_bf16(a16.p, m * k, k, 4.0f, true, 11 + k, st);
    fill_hashed_bf16(w16.p, n * k, k, 1.0f / std::sqrt(float(k)), true, 23 + n, st);
    fill_hashed_bf16(bias.p, n, n, 0.5f, true, 37, st);
    quantize(a16.p, m, k, Nvfp4ScaleRule::kBf16Activation, aq, as, ag, qws, st);
    quantize(w16.p, n, k, Nvfp4ScaleRule::kF32Divide, wq, ws, wg, qws, st);

    ops::LinearNvfp4CudaParams base;
    base.w_q = wq.as<uint8_t>();
    base.w_scales = ws.as<uint8_t>();
    base.w_global = wg.as<float>();
    base.bias = bias.as<__nv_bfloat16>();
    base.y = y.as<__nv_bfloat16>();
    base.rows = m;
    base.in = k;
    base.out = n;
    ops::LinearNvfp4CudaParams p4 = base, p16 = base;
    p4.a_q = aq.as<uint8_t>();
    p4.a_scales = as.as<uint8_t>();
    p4.a_global = ag.as<float>();
    p16.a = a16.as<__nv_bfloat16>();
    size_t ws_bytes = 0;
    for (const Variant& v : variants) {
      ops::LinearNvfp4CudaParams p = v.nvfp4_a ? p4 : p16;
      p.algo = v.algo;
      if (!v.bf16_reference) ws_bytes = std::max(ws_bytes, ops::linear_nvfp4_workspace_bytes(p));
    }
    DevBuf gws(ws_bytes);

    const double flop = 2.0 * double(m) * double(n) * double(k);
    nlohmann::json algos = nlohmann::json::object();
    for (const Variant& v : variants) {
      if (v.bf16_reference) {
        ops::LinearCudaParams lp;
        lp.x = a16.as<__nv_bfloat16>();
        lp.w = w16.as<__nv_bfloat16>();
        lp.bias = base.bias;
        lp.y = base.y;
        lp.rows = m;
        lp.in = k;
        lp.out = n;
        auto [med, best] = tm.time([&] { H3RT_CUDA_CHECK(ops::linear_bf16_cuda(lp, st)); });
        algos[v.name] = {{"median_ms", med}, {"best_ms", best}, {"tflops", flop / med * 1e-9}};
        total[v.name] += med;
        std::printf("  %-4s %6lld x %6lld  %-24s median %8.3f ms  best %8.3f ms  %6.1f TFLOP/s\n",
                    sh.name, (long long)n, (long long)k, v.name, med, best, flop / med * 1e-9);
        continue;
      }
      ops::LinearNvfp4CudaParams p = v.nvfp4_a ? p4 : p16;
      p.algo = v.algo;
      p.workspace = gws.p;
      p.workspace_bytes = ws_bytes;
      const cudaError_t first = ops::linear_nvfp4_cuda(p, st);
      if (first == cudaErrorNotSupported) {
        algos[v.name] = {{"supported", false}};
        complete[v.name] = false;
        std::printf("  %-4s %6lld x %6lld  %-24s not supported on this device\n", sh.name,
                    (long long)n, (long long)k, v.name);
        continue;
      }
      H3RT_CUDA_CHECK(first);
      auto [med, best] = tm.time([&] { H3RT_CUDA_CHECK(ops::linear_nvfp4_cuda(p, st)); });
      algos[v.name] = {{"median_ms", med}, {"best_ms", best}, {"tflops", flop / med * 1e-9}};
      total[v.name] += med;
      std::printf("  %-4s %6lld x %6lld  %-24s median %8.3f ms  best %8.3f ms  %6.1f TFLOP/s\n",
                  sh.name, (long long)n, (long long)k, v.name, med, best, flop / med * 1e-9);
    }

    // The dequantization kernel alone: bytes = codes + scales read, bf16 written.
    nlohmann::json dq = nlohmann::json::object();
    for (bool weights : {true, false}) {
      ops::Nvfp4DequantParams dp;
      dp.q = weights ? wq.as<uint8_t>() : aq.as<uint8_t>();
      dp.scales = weights ? ws.as<uint8_t>() : as.as<uint8_t>();
      dp.rows = weights ? n : m;
      dp.cols = k;
      dp.out = gws.as<__nv_bfloat16>();
      const double bytes = double(dp.rows) * k * 2.5 + double(nvfp4_scales_bytes(dp.rows, k));
      auto [med, best] = tm.time([&] { H3RT_CUDA_CHECK(ops::nvfp4_dequant_bf16(dp, st)); });
      const char* what = weights ? "dequant_w" : "dequant_a";
      dq[what] = {{"rows", dp.rows}, {"cols", k},      {"median_ms", med},
                  {"best_ms", best}, {"bytes", bytes}, {"gbps", bytes / med * 1e-6}};
      std::printf("  %-4s %-31s %6lld x %6lld  median %8.4f ms  best %8.4f ms  %7.1f GB/s\n",
                  sh.name, what, (long long)dp.rows, (long long)k, med, best, bytes / med * 1e-6);
    }
    shapes_json.push_back(
        {{"name", sh.name}, {"n", n}, {"k", k}, {"algos", algos}, {"dequant_kernel", dq}});
  }

  nlohmann::json totals = nlohmann::json::object();
  const double ref = total["bf16_cublaslt"];
  std::printf("totals over the four projections (M = %lld):\n", (long long)m);
  for (const Variant& v : variants) {
    if (!complete[v.name]) {
      totals[v.name] = {{"complete", false}};  // not supported on some shape
      continue;
    }
    totals[v.name] = {{"total_ms", total[v.name]}, {"ratio_vs_bf16", total[v.name] / ref}};
    std::printf("  %-24s %8.3f ms  x%.3f of bf16\n", v.name, total[v.name], total[v.name] / ref);
  }
  const std::string date = utc_date();
  nlohmann::json report = {
      {"bench", "nvfp4_gemm"}, {"date", date},     {"device", prop.name},   {"rows", m},
      {"warmup", o.warmup},    {"iters", o.iters}, {"shapes", shapes_json}, {"totals", totals}};
  if (!o.json_path.empty()) write_json(o.json_path, report);
  return report;
}

}  // namespace h3rt::bench
