// int8 W8A8 GEMM benchmark (see int8_gemm_bench.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_data.h"
#include "bench/int8_gemm_bench.h"
#include "cuda/runtime.h"
#include "h3rt/check.h"
#include "h3rt/report.h"
#include "ops/int8_linear/int8_linear.h"
#include "ops/linear/linear.h"

namespace h3rt::bench {
namespace {

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

struct Shape {
  const char* name;
  int64_t n, k;
};

cudaError_t quantize_int8_path(const DevBuf& x, int64_t rows, int64_t k, int group, const DevBuf& q,
                               const DevBuf& s, ops::Int8QuantizePath path, cudaStream_t st) {
  ops::Int8QuantizeCudaParams p;
  p.x = x.as<__nv_bfloat16>();
  p.q = q.as<int8_t>();
  p.scale = s.as<float>();
  p.rows = rows;
  p.k = k;
  p.group = group;
  p.path = path;
  return ops::int8_quantize_rows_cuda(p, st);
}

void quantize_int8(const DevBuf& x, int64_t rows, int64_t k, int group, const DevBuf& q,
                   const DevBuf& s, cudaStream_t st) {
  ops::Int8QuantizeCudaParams p;
  p.x = x.as<__nv_bfloat16>();
  p.q = q.as<int8_t>();
  p.scale = s.as<float>();
  p.rows = rows;
  p.k = k;
  p.group = group;
  H3RT_CUDA_CHECK(ops::int8_quantize_rows_cuda(p, st));
}

void quantize_fp8(const DevBuf& x, int64_t rows, int64_t k, const DevBuf& q, const float* scale,
                  cudaStream_t st) {
  ops::QuantizeE4m3CudaParams p;
  p.x = x.as<__nv_bfloat16>();
  p.q = q.as<__nv_fp8_e4m3>();
  p.scale = scale;
  p.rows = rows;
  p.cols = k;
  H3RT_CUDA_CHECK(ops::quantize_e4m3_cuda(p, st));
}

}  // namespace

nlohmann::json run_int8_gemm_bench(const Int8GemmBenchOptions& o) {
  H3RT_CHECK(!o.rows.empty() && o.iters >= 1 && o.warmup >= 0 && o.hidden % 256 == 0 &&
                 o.inner % 256 == 0 && o.ffn % 256 == 0,
             "int8-gemm bench: bad options (widths must be multiples of 256)");
  for (int64_t r : o.rows) H3RT_CHECK(r > 0, "int8-gemm bench: rows must be positive");
  int dev = 0;
  cudaDeviceProp prop{};
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  H3RT_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  cudaStream_t st;
  H3RT_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  Timer tm{st, nullptr, nullptr, o.warmup, o.iters};
  H3RT_CUDA_CHECK(cudaEventCreate(&tm.e0));
  H3RT_CUDA_CHECK(cudaEventCreate(&tm.e1));

  const Shape shapes[] = {{"qkv", o.qkv_out, o.hidden},
                          {"out", o.hidden, o.inner},
                          {"fc1", 2 * o.ffn, o.hidden},
                          {"fc2", o.hidden, o.ffn}};
  using P = ops::Int8GemmPath;
  std::vector<P> paths;
  for (P p : {P::kCutlassSm90, P::kCublasLt})
    if (ops::int8_linear_path_available(p)) paths.push_back(p);
  std::printf("int8 GEMM bench on %s: group %d, median of %d after %d warm-up\n", prop.name,
              o.group, o.iters, o.warmup);
  std::printf("  %-5s %4s %6s %6s | %-9s | %-15s | %-22s | %-22s | %-16s | %-16s | %s\n", "S",
              "proj", "N", "K", "quant ms", "team/block ms", "int8 cutlass ms/TOPS",
              "int8 cublaslt ms/TOPS", "fp8 ms/TOPS", "bf16 ms/TFLOPS", "int8/fp8");
  DevBuf one(4);  // fp8 scales: 1 (the hashed data lies well inside e4m3's range)
  const float f1 = 1.0f;
  H3RT_CUDA_CHECK(cudaMemcpy(one.p, &f1, 4, cudaMemcpyHostToDevice));

  nlohmann::json runs = nlohmann::json::array();
  for (int64_t m : o.rows) {
    nlohmann::json shapes_json = nlohmann::json::array();
    std::map<std::string, double> total;
    for (const Shape& sh : shapes) {
      const int64_t n = sh.n, k = sh.k;
      DevBuf x16(size_t(m) * k * 2), w16(size_t(n) * k * 2), bias(size_t(n) * 2),
          y(size_t(m) * n * 2);
      DevBuf xq(size_t(m) * k), xs(size_t(m) * 4), wq(size_t(n) * k), ws(size_t(n) * 4);
      DevBuf x8(size_t(m) * k), w8(size_t(n) * k);
      DevBuf work(ops::int8_linear_workspace_bytes(m, n));
      fill_hashed_bf16(x16.p, m * k, k, 4.0f, true, 11 + k, st);
      fill_hashed_bf16(w16.p, n * k, k, 1.0f / std::sqrt(float(k)), true, 23 + n, st);
      fill_hashed_bf16(bias.p, n, n, 0.5f, true, 37, st);
      quantize_int8(w16, n, k, o.group, wq, ws, st);
      quantize_fp8(x16, m, k, x8, one.as<float>(), st);
      quantize_fp8(w16, n, k, w8, one.as<float>(), st);

      const double ops_count = 2.0 * double(m) * double(n) * double(k);
      nlohmann::json algos = nlohmann::json::object();
      auto record = [&](const std::string& name, std::pair<double, double> t) {
        algos[name] = {
            {"median_ms", t.first}, {"best_ms", t.second}, {"tops", ops_count / t.first * 1e-9}};
        total[name] += t.first;
        return t.first;
      };
      // Activation rotate + quantize: bytes = bf16 read + int8 and scales written.
      const auto tq = tm.time([&] { quantize_int8(x16, m, k, o.group, xq, xs, st); });
      const double qbytes = double(m) * k * 3 + double(m) * 4;
      nlohmann::json quant = {
          {"median_ms", tq.first}, {"best_ms", tq.second}, {"gbps", qbytes / tq.first * 1e-6}};
      total["quantize"] += tq.first;
      // The same call on each register kernel (team: warps own row slices; block: the older
      // one-row-per-CTA kernel), where it can run, for an old/new comparison in one run.
      double t_team = -1.0, t_block = -1.0;
      for (ops::Int8QuantizePath path :
           {ops::Int8QuantizePath::kTeam, ops::Int8QuantizePath::kBlock}) {
        const cudaError_t first = quantize_int8_path(x16, m, k, o.group, xq, xs, path, st);
        const std::string name = std::string("quantize_") + ops::int8_quantize_path_name(path);
        if (first == cudaErrorNotSupported) {
          quant[name] = {{"supported", false}};
          continue;
        }
        H3RT_CUDA_CHECK(first);
        const auto t = tm.time(
            [&] { H3RT_CUDA_CHECK(quantize_int8_path(x16, m, k, o.group, xq, xs, path, st)); });
        quant[name] = {
            {"median_ms", t.first}, {"best_ms", t.second}, {"gbps", qbytes / t.first * 1e-6}};
        total[name] += t.first;
        (path == ops::Int8QuantizePath::kTeam ? t_team : t_block) = t.first;
      }
      quantize_int8(x16, m, k, o.group, xq, xs, st);  // xq / xs for the GEMMs: the kAuto result

      ops::Int8LinearCudaParams ip;
      ip.x = xq.as<int8_t>();
      ip.x_scale = xs.as<float>();
      ip.w = wq.as<int8_t>();
      ip.w_scale = ws.as<float>();
      ip.bias = bias.as<__nv_bfloat16>();
      ip.y = y.as<__nv_bfloat16>();
      ip.rows = m;
      ip.in = k;
      ip.out = n;
      ip.workspace = work.p;
      ip.workspace_bytes = ops::int8_linear_workspace_bytes(m, n);
      double int8_best = 0.0, t_cutlass = -1.0, t_lt = -1.0;
      for (P path : paths) {
        ip.path = path;
        const cudaError_t first = ops::int8_linear_cuda(ip, st);
        const std::string name = std::string("int8_") + ops::int8_gemm_path_name(path);
        if (first == cudaErrorNotSupported) {
          algos[name] = {{"supported", false}};
          continue;
        }
        H3RT_CUDA_CHECK(first);
        const double t =
            record(name, tm.time([&] { H3RT_CUDA_CHECK(ops::int8_linear_cuda(ip, st)); }));
        (path == P::kCutlassSm90 ? t_cutlass : t_lt) = t;
        int8_best = int8_best > 0.0 ? std::min(int8_best, t) : t;
      }

      ops::LinearFp8CudaParams fp;
      fp.x = x8.as<__nv_fp8_e4m3>();
      fp.w = w8.as<__nv_fp8_e4m3>();
      fp.x_scale = fp.w_scale = one.as<float>();
      fp.bias = bias.as<__nv_bfloat16>();
      fp.y = y.as<__nv_bfloat16>();
      fp.rows = m;
      fp.in = k;
      fp.out = n;
      const double t_fp8 =
          record("fp8_cublaslt", tm.time([&] { H3RT_CUDA_CHECK(ops::linear_fp8_cuda(fp, st)); }));

      ops::LinearCudaParams bp;
      bp.x = x16.as<__nv_bfloat16>();
      bp.w = w16.as<__nv_bfloat16>();
      bp.bias = bias.as<__nv_bfloat16>();
      bp.y = y.as<__nv_bfloat16>();
      bp.rows = m;
      bp.in = k;
      bp.out = n;
      const double t_bf16 =
          record("bf16_cublaslt", tm.time([&] { H3RT_CUDA_CHECK(ops::linear_bf16_cuda(bp, st)); }));

      auto cell = [&](double t) {
        char b[32];
        if (t < 0)
          std::snprintf(b, sizeof b, "%s", "n/a");
        else
          std::snprintf(b, sizeof b, "%8.3f %7.1f", t, ops_count / t * 1e-9);
        return std::string(b);
      };
      const double ratio = int8_best > 0.0 ? int8_best / t_fp8 : 0.0;
      char qcell[32];
      std::snprintf(qcell, sizeof qcell, "%7.3f %7.3f", t_team, t_block);
      std::printf(
          "  %-5lld %4s %6lld %6lld | %9.3f | %-15s | %-22s | %-22s | %-16s | %-16s | %.3f\n",
          (long long)m, sh.name, (long long)n, (long long)k, tq.first, qcell,
          cell(t_cutlass).c_str(), cell(t_lt).c_str(), cell(t_fp8).c_str(), cell(t_bf16).c_str(),
          ratio);
      shapes_json.push_back({{"name", sh.name},
                             {"n", n},
                             {"k", k},
                             {"quantize", quant},
                             {"algos", algos},
                             {"int8_over_fp8", ratio}});
    }
    nlohmann::json totals = nlohmann::json::object();
    std::printf("  totals S = %lld:", (long long)m);
    for (const auto& [name, t] : total) {
      totals[name] = t;
      std::printf("  %s %.3f ms", name.c_str(), t);
    }
    std::printf("\n");
    runs.push_back({{"rows", m}, {"shapes", shapes_json}, {"totals_ms", totals}});
  }
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  nlohmann::json report = {{"bench", "int8_gemm"}, {"date", date},       {"device", prop.name},
                           {"group", o.group},     {"warmup", o.warmup}, {"iters", o.iters},
                           {"runs", runs}};
  if (!o.json_path.empty()) write_json(o.json_path, report);
  cudaEventDestroy(tm.e0);
  cudaEventDestroy(tm.e1);
  cudaStreamDestroy(st);
  return report;
}

}  // namespace h3rt::bench
