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
#include "bench/gemm_bench_util.h"
#include "bench/int8_gemm_bench.h"
#include "cuda/runtime.h"
#include "h3rt/check.h"
#include "h3rt/report.h"
#include "ops/int8_linear/int8_linear.h"
#include "ops/linear/linear.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"
#include "ops/swiglu/swiglu.h"

namespace h3rt::bench {
namespace {

struct Shape {
  const char* name;
  int64_t n, k;
};

cudaError_t quantize_int8_path(const DevBuf& x, int64_t rows, int64_t k, int group, const DevBuf& q,
                               const DevBuf& s, ops::Int8QuantizePath path, cudaStream_t st,
                               ops::Int8RotateMath rotate = ops::Int8RotateMath::kAuto) {
  ops::Int8QuantizeCudaParams p;
  p.x = x.as<__nv_bfloat16>();
  p.q = q.as<int8_t>();
  p.scale = s.as<float>();
  p.rows = rows;
  p.k = k;
  p.group = group;
  p.path = path;
  p.rotate = rotate;
  return ops::int8_quantize_rows_cuda(p, st);
}

// The fused producer: a plain RMSNorm of x whose output is rotated and quantized in the launch.
void norm_int8(const DevBuf& x, int64_t rows, int64_t k, int group, const DevBuf& q,
               const DevBuf& s, ops::Int8RotateMath rotate, cudaStream_t st) {
  ops::RmsNormModulateCudaParams p;
  p.x = x.as<__nv_bfloat16>();
  p.rows = rows;
  p.dim = k;
  p.int8.q = q.as<int8_t>();
  p.int8.scale = s.as<float>();
  p.int8.group = group;
  p.int8.rotate = rotate;
  H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(p, st));
}

void quantize_int8(const DevBuf& x, int64_t rows, int64_t k, int group, const DevBuf& q,
                   const DevBuf& s, cudaStream_t st) {
  H3RT_CUDA_CHECK(quantize_int8_path(x, rows, k, group, q, s, ops::Int8QuantizePath::kAuto, st));
}

// What rotation + quantization adds to an int8 block of m rows, as the block runs it (kAuto
// forms): for the qkv and fc1 inputs, the modulated norm with its int8 output less the same norm
// writing bf16; for fc2's, the swiglu table path with its int8 output less the table path writing
// bf16 (where the block fuses it, else the standalone quantizer); for out's, the standalone
// quantizer. The block's two norms are timed as one (same width and output), counted twice.
nlohmann::json time_rotation_added(const Int8GemmBenchOptions& o, int64_t m, Timer& tm,
                                   cudaStream_t st) {
  const int64_t h = o.hidden, f = o.ffn, wide = std::max({h, f, o.inner});
  DevBuf x(size_t(m) * h * 2), y(size_t(m) * wide * 2), mod(size_t(h) * 2),
      h1(size_t(m) * 2 * f * 2);
  DevBuf q(size_t(m) * wide), sc(size_t(m) * 4), table(ops::kSiluTableEntries * 2);
  fill_hashed_bf16(x.p, m * h, h, 4.0f, true, 5, st);
  fill_hashed_bf16(mod.p, h, h, 0.25f, false, 7, st);
  fill_hashed_bf16(h1.p, m * 2 * f, 2 * f, 3.0f, true, 9, st);
  H3RT_CUDA_CHECK(ops::swiglu_silu_table_cuda(table.as<__nv_bfloat16>(), st));
  ops::RmsNormModulateCudaParams n;
  n.x = x.as<__nv_bfloat16>();
  n.shift = n.scale = mod.as<__nv_bfloat16>();
  n.rows = m;
  n.dim = h;
  n.table_row_stride = h;
  ops::Int8Out i8;  // the producers' int8 output, or their bf16 output into y
  i8.q = q.as<int8_t>();
  i8.scale = sc.as<float>();
  i8.group = o.group;
  const auto norm_ms = [&](bool int8) {
    ops::RmsNormModulateCudaParams p = n;
    if (int8)
      p.int8 = i8;
    else
      p.y = y.as<__nv_bfloat16>();
    return tm.time([&] { H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(p, st)); }).first;
  };
  ops::SwigluCudaParams w;
  w.in = h1.as<__nv_bfloat16>();
  w.rows = m;
  w.ffn = f;
  w.silu_table = table.as<__nv_bfloat16>();
  const auto swiglu_ms = [&](bool int8) {
    ops::SwigluCudaParams p = w;
    if (int8)
      p.int8 = i8;
    else
      p.out = y.as<__nv_bfloat16>();
    return tm.time([&] { H3RT_CUDA_CHECK(ops::swiglu_cuda(p, st)); }).first;
  };
  const auto quant_ms = [&](int64_t k) {
    return tm.time([&] { quantize_int8(y, m, k, o.group, q, sc, st); }).first;
  };
  nlohmann::json r = nlohmann::json::object();
  double added = 0.0;
  if (ops::rmsnorm_modulate_int8_fusable(h, o.group)) {
    const double plain = norm_ms(false), fused = norm_ms(true);
    r["norm_bf16_ms"] = plain;
    r["norm_int8_ms"] = fused;
    added += 2.0 * (fused - plain);
  } else {
    r["quantize_norm_output_ms"] = quant_ms(h);
    added += 2.0 * r["quantize_norm_output_ms"].get<double>();
  }
  if (ops::swiglu_int8_fusable(f, o.group)) {
    const double plain = swiglu_ms(false), fused = swiglu_ms(true);
    r["swiglu_bf16_ms"] = plain;
    r["swiglu_int8_ms"] = fused;
    added += fused - plain;
  } else {
    r["quantize_swiglu_output_ms"] = quant_ms(f);
    added += r["quantize_swiglu_output_ms"].get<double>();
  }
  r["quantize_attention_output_ms"] = quant_ms(o.inner);
  added += r["quantize_attention_output_ms"].get<double>();
  r["added_per_block_ms"] = added;
  return r;
}

}  // namespace

nlohmann::json run_int8_gemm_bench(const Int8GemmBenchOptions& o) {
  cuda::require_cuda_device("bench int8-gemm");
  H3RT_CHECK(!o.rows.empty() && o.iters >= 1 && o.warmup >= 0 && o.hidden % 256 == 0 &&
                 o.inner % 256 == 0 && o.ffn % 256 == 0,
             "int8-gemm bench: bad options (widths must be multiples of 256)");
  for (int64_t r : o.rows) H3RT_CHECK(r > 0, "int8-gemm bench: rows must be positive");
  BenchContext ctx(o.warmup, o.iters);
  const cudaDeviceProp& prop = ctx.prop;
  cudaStream_t st = ctx.st;
  Timer& tm = ctx.tm;

  const Shape shapes[] = {{"qkv", o.qkv_out, o.hidden},
                          {"out", o.hidden, o.inner},
                          {"fc1", 2 * o.ffn, o.hidden},
                          {"fc2", o.hidden, o.ffn}};
  // The int8 variants timed side by side: every CUTLASS config (when this device runs CUTLASS),
  // then cuBLASLt + epilogue.
  struct Variant {
    std::string name;  // JSON key and column
    ops::Int8GemmPath path;
    ops::Int8CutlassConfig config;
  };
  std::vector<Variant> variants;
  if (ops::int8_linear_path_available(ops::Int8GemmPath::kCutlassSm90))
    for (ops::Int8CutlassConfig c : ops::kInt8CutlassConfigs)
      variants.push_back({std::string("int8_cutlass_") + ops::int8_cutlass_config_name(c),
                          ops::Int8GemmPath::kCutlassSm90, c});
  // The mma.sync kernel (sm_120 / sm_121's default) runs here too: timed for the record, not as
  // a GB10 figure.
  if (ops::int8_linear_path_available(ops::Int8GemmPath::kCutlassSm80))
    variants.push_back(
        {"int8_cutlass_sm80", ops::Int8GemmPath::kCutlassSm80, ops::Int8CutlassConfig::kAuto});
  variants.push_back(
      {"int8_cublaslt", ops::Int8GemmPath::kCublasLt, ops::Int8CutlassConfig::kAuto});
  std::printf(
      "int8 GEMM bench on %s: group %d, median of %d after %d warm-up (ms; int8 columns "
      "without prefix are CUTLASS configs, H3RT_INT8_GEMM=cutlass_<name>)\n",
      prop.name, o.group, o.iters, o.warmup);
  std::string head;
  char hb[256];
  std::printf(
      "  rotation forms (team kernel; fused = rmsnorm_modulate with int8 output, qkv/fc1 only): "
      "dbl = double, int = integer; kAuto takes %s here. The integer form is the default on "
      "Hopper and on sm_120 / sm_121 (FP64 at 1/64 rate, where it also has an int64 tier).\n",
      ops::int8_rotate_math_name(ops::int8_rotate_auto_math()));
  std::snprintf(hb, sizeof hb, "  %-5s %4s %6s %6s | %8s %7s %7s %7s %7s %7s %7s |", "S", "proj",
                "N", "K", "quant", "team", "block", "dbl", "int", "fus-dbl", "fus-int");
  head += hb;
  for (const Variant& v : variants) {
    const std::string col = v.name.rfind("int8_cutlass_", 0) == 0 ? v.name.substr(13) : v.name;
    std::snprintf(hb, sizeof hb, " %12s", col.c_str());
    head += hb;
  }
  std::snprintf(hb, sizeof hb, " | %8s %8s | %-22s %8s", "fp8", "bf16", "best int8", "best/fp8");
  head += hb;
  std::printf("%s\n", head.c_str());
  DevBuf one(4);  // fp8 scales: 1 (the hashed data lies well inside e4m3's range)
  const float f1 = 1.0f;
  H3RT_CUDA_CHECK(cudaMemcpy(one.p, &f1, 4, cudaMemcpyHostToDevice));

  nlohmann::json runs = nlohmann::json::array();
  for (int64_t m : o.rows) {
    nlohmann::json shapes_json = nlohmann::json::array();
    std::map<std::string, double> total;
    for (const Shape& sh : shapes) {
      const int64_t n = sh.n, k = sh.k;
      DevBuf x16(size_t(m) * k * 2), w16(size_t(n) * k * 2), y(size_t(m) * n * 2);
      DevBuf xq(size_t(m) * k), xs(size_t(m) * 4), wq(size_t(n) * k), ws(size_t(n) * 4);
      DevBuf x8(size_t(m) * k), w8(size_t(n) * k);
      DevBuf work(ops::int8_linear_workspace_bytes(m, n));
      fill_hashed_bf16(x16.p, m * k, k, 4.0f, true, 11 + k, st);
      fill_hashed_bf16(w16.p, n * k, k, 1.0f / std::sqrt(float(k)), true, 23 + n, st);
      quantize_int8(w16, n, k, o.group, wq, ws, st);
      quantize_e4m3(x16, m, k, x8, one.as<float>(), st);
      quantize_e4m3(w16, n, k, w8, one.as<float>(), st);

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
      // The team kernel in each rotation form, then the fused producer in each (where it fuses).
      double t_form[2] = {-1.0, -1.0}, t_fused[2] = {-1.0, -1.0};
      const ops::Int8RotateMath forms[2] = {ops::Int8RotateMath::kDouble,
                                            ops::Int8RotateMath::kInteger};
      for (int f = 0; f < 2 && o.group > 0; ++f) {
        const std::string name =
            std::string("quantize_team_") + ops::int8_rotate_math_name(forms[f]);
        const cudaError_t first = quantize_int8_path(x16, m, k, o.group, xq, xs,
                                                     ops::Int8QuantizePath::kTeam, st, forms[f]);
        if (first == cudaErrorNotSupported) {
          quant[name] = {{"supported", false}};
          continue;
        }
        H3RT_CUDA_CHECK(first);
        const auto t = tm.time([&] {
          H3RT_CUDA_CHECK(quantize_int8_path(x16, m, k, o.group, xq, xs,
                                             ops::Int8QuantizePath::kTeam, st, forms[f]));
        });
        quant[name] = {
            {"median_ms", t.first}, {"best_ms", t.second}, {"gbps", qbytes / t.first * 1e-6}};
        total[name] += t.first;
        t_form[f] = t.first;
      }
      for (int f = 0; f < 2 && ops::rmsnorm_modulate_int8_fusable(k, o.group); ++f) {
        const std::string name =
            std::string("rmsnorm_int8_") + ops::int8_rotate_math_name(forms[f]);
        const auto t = tm.time([&] { norm_int8(x16, m, k, o.group, xq, xs, forms[f], st); });
        quant[name] = {{"median_ms", t.first}, {"best_ms", t.second}};
        total[name] += t.first;
        t_fused[f] = t.first;
      }
      quantize_int8(x16, m, k, o.group, xq, xs, st);  // xq / xs for the GEMMs: the kAuto result

      ops::Int8LinearCudaParams ip;
      ip.x = xq.as<int8_t>();
      ip.x_scale = xs.as<float>();
      ip.w = wq.as<int8_t>();
      ip.w_scale = ws.as<float>();
      ip.y = y.as<__nv_bfloat16>();
      ip.rows = m;
      ip.in = k;
      ip.out = n;
      ip.workspace = work.p;
      ip.workspace_bytes = ops::int8_linear_workspace_bytes(m, n);
      std::vector<double> t_variant(variants.size(), -1.0);
      double int8_best = 0.0;
      std::string best_name;
      for (size_t vi = 0; vi < variants.size(); ++vi) {
        const Variant& v = variants[vi];
        ip.path = v.path;
        ip.cutlass_config = v.config;
        const cudaError_t first = ops::int8_linear_cuda(ip, st);
        if (first == cudaErrorNotSupported) {
          algos[v.name] = {{"supported", false}};
          continue;
        }
        H3RT_CUDA_CHECK(first);
        const double t =
            record(v.name, tm.time([&] { H3RT_CUDA_CHECK(ops::int8_linear_cuda(ip, st)); }));
        t_variant[vi] = t;
        if (int8_best <= 0.0 || t < int8_best) {
          int8_best = t;
          best_name = v.name;
        }
      }
      // What kAuto (the dispatcher's table, without environment override) runs for this shape.
      ip.path = ops::Int8GemmPath::kCutlassSm90;
      ip.cutlass_config = ops::Int8CutlassConfig::kAuto;
      const std::string auto_config =
          ops::int8_cutlass_config_name(ops::int8_linear_resolve_cutlass_config(ip));

      ops::LinearFp8CudaParams fp;
      fp.x = x8.as<__nv_fp8_e4m3>();
      fp.w = w8.as<__nv_fp8_e4m3>();
      fp.x_scale = fp.w_scale = one.as<float>();
      fp.y = y.as<__nv_bfloat16>();
      fp.rows = m;
      fp.in = k;
      fp.out = n;
      const double t_fp8 =
          record("fp8_cublaslt", tm.time([&] { H3RT_CUDA_CHECK(ops::linear_fp8_cuda(fp, st)); }));

      ops::LinearCudaParams bp;
      bp.x = x16.as<__nv_bfloat16>();
      bp.w = w16.as<__nv_bfloat16>();
      bp.y = y.as<__nv_bfloat16>();
      bp.rows = m;
      bp.in = k;
      bp.out = n;
      const double t_bf16 =
          record("bf16_cublaslt", tm.time([&] { H3RT_CUDA_CHECK(ops::linear_bf16_cuda(bp, st)); }));

      const double ratio = int8_best > 0.0 ? int8_best / t_fp8 : 0.0;
      std::string line;
      char lb[256];
      std::snprintf(lb, sizeof lb,
                    "  %-5lld %4s %6lld %6lld | %8.3f %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f |",
                    (long long)m, sh.name, (long long)n, (long long)k, tq.first, t_team, t_block,
                    t_form[0], t_form[1], t_fused[0], t_fused[1]);
      line += lb;
      for (double t : t_variant) {
        if (t < 0)
          std::snprintf(lb, sizeof lb, " %12s", "n/a");
        else
          std::snprintf(lb, sizeof lb, " %12.3f", t);
        line += lb;
      }
      std::snprintf(lb, sizeof lb, " | %8.3f %8.3f | %-22s %8.3f", t_fp8, t_bf16, best_name.c_str(),
                    ratio);
      line += lb;
      std::printf("%s\n", line.c_str());
      shapes_json.push_back({{"name", sh.name},
                             {"n", n},
                             {"k", k},
                             {"quantize", quant},
                             {"algos", algos},
                             {"int8_best", best_name},
                             {"auto_cutlass_config", auto_config},
                             {"int8_over_fp8", ratio}});
    }
    nlohmann::json totals = nlohmann::json::object();
    std::printf("  totals S = %lld:", (long long)m);
    for (const auto& [name, t] : total) {
      totals[name] = t;
      std::printf("  %s %.3f ms", name.c_str(), t);
    }
    std::printf("\n");
    const nlohmann::json added = time_rotation_added(o, m, tm, st);
    std::printf("  rotation + quantization added to a block at S = %lld: %.3f ms (%s)\n",
                (long long)m, added["added_per_block_ms"].get<double>(), added.dump().c_str());
    runs.push_back(
        {{"rows", m}, {"shapes", shapes_json}, {"totals_ms", totals}, {"rotation_added", added}});
  }
  const std::string date = utc_date();
  nlohmann::json report = {{"bench", "int8_gemm"}, {"date", date},       {"device", prop.name},
                           {"group", o.group},     {"warmup", o.warmup}, {"iters", o.iters},
                           {"runs", runs}};
  if (!o.json_path.empty()) write_json(o.json_path, report);
  return report;
}

}  // namespace h3rt::bench
