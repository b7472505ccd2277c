// cuBLASLt algorithm sweep at the H3 projections (see gemm_algos_bench.h).
#include <cuda_runtime.h>

#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "bench/bench_data.h"
#include "bench/gemm_algos_bench.h"
#include "bench/gemm_bench_util.h"
#include "cuda/runtime.h"
#include "h3rt/check.h"
#include "h3rt/report.h"
#include "ops/linear/cublaslt_gemm.h"
#include "ops/linear/linear.h"

namespace h3rt::bench {
namespace {

struct Shape {
  const char* name;
  int64_t n, k;
};

nlohmann::json algo_json(const ops::lt::AlgoInfo& a) {
  return {{"id", a.id},
          {"tile", a.tile},
          {"stages", a.stages},
          {"split_k", a.split_k},
          {"reduction", a.reduction},
          {"swizzle", a.swizzle},
          {"cluster", a.cluster},
          {"custom", a.custom},
          {"waves", a.waves},
          {"workspace_bytes", a.workspace_bytes}};
}

// The operands of one shape, filled once for every kind and algorithm.
struct Operands {
  DevBuf x16, w16, y, x8, w8;
  Operands(int64_t m, int64_t n, int64_t k)
      : x16(size_t(m) * k * 2),
        w16(size_t(n) * k * 2),
        y(size_t(m) * n * 2),
        x8(size_t(m) * k),
        w8(size_t(n) * k) {}
};

ops::lt::Gemm gemm_for(const std::string& kind, const Operands& op, const float* one, int64_t m,
                       const Shape& sh) {
  ops::lt::Gemm g;
  const bool fp8 = kind == "fp8";
  g.kind = fp8 ? ops::lt::Operands::kFp8 : ops::lt::Operands::kBf16;
  g.w = fp8 ? op.w8.p : op.w16.p;
  g.x = fp8 ? op.x8.p : op.x16.p;
  g.x_ld = sh.k;
  if (fp8) g.w_scale = g.x_scale = one;
  // No bias: H3's block projections have none (the block's GEMMs, and so cuBLASLt's heuristic
  // list and h3rt's pick, are the bias-free ones).
  g.y = op.y.as<__nv_bfloat16>();
  g.y_ld = sh.n;
  g.rows = m;
  g.in = sh.k;
  g.out = sh.n;
  return g;
}

// Every candidate of one (S, kind, shape): its times, and the shape's summary line.
nlohmann::json sweep_shape(const ops::lt::Gemm& base, Timer& tm, const GemmAlgosBenchOptions& o,
                           const char* name, double flops, double* t_default, double* t_best) {
  const std::vector<ops::lt::AlgoInfo> algos = ops::lt::algos(base, o.max_algos);
  // h3rt's pick (Gemm::algo 0: the heuristic's first, or the configuration preferred for this
  // shape and GPU) is timed before and after the list and reported as the mean: timed once after
  // the list, it ran up to 1.3x slower than the same configuration timed in the list
  // (bench/RESULTS.md session 20).
  const auto time_pick = [&] {
    return tm.time([&] { H3RT_CUDA_CHECK(ops::lt::gemm(base, tm.s)); }).first;
  };
  const double pick_before = time_pick();
  nlohmann::json list = nlohmann::json::array();
  int best = -1;
  double best_ms = 0, first_ms = 0;
  for (size_t i = 0; i < algos.size(); ++i) {
    ops::lt::Gemm g = base;
    g.algo = static_cast<int>(i);
    g.listed = true;
    nlohmann::json a = algo_json(algos[i]);
    a["index"] = i;
    cudaError_t e = cudaSuccess;
    try {
      e = ops::lt::gemm(g, tm.s);
    } catch (const Error& err) {
      a["error"] = err.what();
      e = cudaErrorUnknown;
    }
    if (e != cudaSuccess) {
      a["runs"] = false;
      cudaGetLastError();
      list.push_back(a);
      continue;
    }
    const auto t = tm.time([&] { H3RT_CUDA_CHECK(ops::lt::gemm(g, tm.s)); });
    a["runs"] = true;
    a["median_ms"] = t.first;
    a["tflops"] = flops / t.first * 1e-9;
    if (i == 0) first_ms = t.first;
    if (best < 0 || t.first < best_ms) {
      best = static_cast<int>(i);
      best_ms = t.first;
    }
    list.push_back(a);
  }
  H3RT_CHECK(!algos.empty() && first_ms > 0, "gemm-algos: cuBLASLt runs no algorithm for ", name,
             " at ", base.rows, " rows");
  const ops::lt::AlgoInfo pick = ops::lt::algo_of(base);
  const double pick_after = time_pick(), pick_ms = 0.5 * (pick_before + pick_after);
  *t_default += pick_ms;
  *t_best += best_ms;
  std::printf(
      "  %-4s %6lld %6lld | %3zu algos | h3rt (tile %d cluster %d) %8.3f ms %7.1f TF/s | #0 "
      "%8.3f | best #%-2d %8.3f ms %7.1f TF/s (id %d tile %d stages %d splitk %d reduction %d "
      "swizzle %d cluster %d) %.3fx\n",
      name, (long long)base.out, (long long)base.in, algos.size(), pick.tile, pick.cluster, pick_ms,
      flops / pick_ms * 1e-9, first_ms, best, best_ms, flops / best_ms * 1e-9, algos[best].id,
      algos[best].tile, algos[best].stages, algos[best].split_k, algos[best].reduction,
      algos[best].swizzle, algos[best].cluster, pick_ms / best_ms);
  return {{"shape", name},
          {"n", base.out},
          {"k", base.in},
          {"default_ms", pick_ms},
          {"default_ms_before_after", {pick_before, pick_after}},
          {"default", algo_json(pick)},
          {"first_ms", first_ms},
          {"best_index", best},
          {"best_ms", best_ms},
          {"speedup", pick_ms / best_ms},
          {"algos", list}};
}

}  // namespace

nlohmann::json run_gemm_algos_bench(const GemmAlgosBenchOptions& o) {
  cuda::require_cuda_device("bench gemm-algos");
  H3RT_CHECK(!o.rows.empty() && o.iters >= 1 && o.warmup >= 0 && o.max_algos >= 1 &&
                 o.max_algos <= ops::lt::kMaxAlgos,
             "gemm-algos bench: bad options (--max-algos 1..", ops::lt::kMaxAlgos, ")");
  for (int64_t r : o.rows) H3RT_CHECK(r > 0, "gemm-algos bench: rows must be positive");
  for (const std::string& k : o.kinds)
    H3RT_CHECK(k == "fp8" || k == "bf16", "gemm-algos bench: unknown kind '", k, "' (fp8 or bf16)");
  BenchContext ctx(o.warmup, o.iters);
  const cudaDeviceProp& prop = ctx.prop;
  cudaStream_t st = ctx.st;
  Timer& tm = ctx.tm;
  DevBuf one(4);
  const float f1 = 1.0f;
  H3RT_CUDA_CHECK(cudaMemcpy(one.p, &f1, 4, cudaMemcpyHostToDevice));
  const Shape shapes[] = {{"qkv", 3 * o.inner, o.hidden},
                          {"out", o.hidden, o.inner},
                          {"fc1", 2 * o.ffn, o.hidden},
                          {"fc2", o.hidden, o.ffn}};
  std::printf(
      "cuBLASLt algorithm sweep on %s: up to %d heuristic algorithms per GEMM, median of "
      "%d after %d warm-up; h3rt = what h3rt runs (#0, the heuristic's first, unless a "
      "configuration is preferred for the shape and GPU)\n",
      prop.name, o.max_algos, o.iters, o.warmup);
  nlohmann::json runs = nlohmann::json::array();
  for (int64_t m : o.rows)
    for (const std::string& kind : o.kinds) {
      std::printf(" S = %lld, %s (N x K):\n", (long long)m, kind.c_str());
      nlohmann::json shapes_json = nlohmann::json::array();
      double t_default = 0, t_best = 0;
      for (const Shape& sh : shapes) {
        Operands op(m, sh.n, sh.k);
        fill_hashed_bf16(op.x16.p, m * sh.k, sh.k, 4.0f, true, 11 + sh.k, st);
        fill_hashed_bf16(op.w16.p, sh.n * sh.k, sh.k, 1.0f / 64, true, 23 + sh.n, st);
        if (kind == "fp8") {
          quantize_e4m3(op.x16, m, sh.k, op.x8, one.as<float>(), st);
          quantize_e4m3(op.w16, sh.n, sh.k, op.w8, one.as<float>(), st);
        }
        const double flops = 2.0 * double(m) * double(sh.n) * double(sh.k);
        const ops::lt::Gemm g = gemm_for(kind, op, one.as<float>(), m, sh);
        const nlohmann::json shape = sweep_shape(g, tm, o, sh.name, flops, &t_default, &t_best);
        shapes_json.push_back(shape);
      }
      std::printf("  total: default %.3f ms, per-shape best %.3f ms (%.3fx)\n", t_default, t_best,
                  t_default / t_best);
      const nlohmann::json run = {{"rows", m},
                                  {"kind", kind},
                                  {"shapes", shapes_json},
                                  {"total_default_ms", t_default},
                                  {"total_best_ms", t_best}};
      runs.push_back(run);
    }
  const std::string date = utc_date();
  nlohmann::json report = {{"bench", "gemm_algos"}, {"date", date},
                           {"device", prop.name},   {"max_algos", o.max_algos},
                           {"warmup", o.warmup},    {"iters", o.iters},
                           {"runs", runs}};
  if (!o.json_path.empty()) write_json(o.json_path, report);
  return report;
}

}  // namespace h3rt::bench
