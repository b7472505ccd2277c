// Sage attention benchmark (see attention_sage_bench.h). Input: synthetic bf16 QKV rows
// [S][3*H*128] (the strided layout the model produces), values ~N(0,1) from a hash.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/attention_sage_bench.h"
#include "bench/device_info.h"
#include "bench/sustained_run.h"
#include "bench/telemetry.h"
#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "h3rt/check.h"
#include "h3rt/report.h"
#include "h3rt/safetensors.h"
#include "ops/attention/attention.h"
#include "ops/attention_sage/attention_sage.h"
#include "ops/attention_sage/attention_sage_cuda.h"
#include "ops/attention_sparse/router_cuda.h"

namespace h3rt::bench {
namespace {

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

// Sum of squared differences and of squares of two bf16 buffers (for rel. L2 between kernels).
__global__ void diff_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n,
                            double* acc) {
  double d2 = 0.0, b2 = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const double x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
    d2 += (x - y) * (x - y);
    b2 += y * y;
  }
  for (int o = 16; o > 0; o >>= 1) {
    d2 += __shfl_xor_sync(0xffffffffu, d2, o);
    b2 += __shfl_xor_sync(0xffffffffu, b2, o);
  }
  if (threadIdx.x % 32 == 0) {
    atomicAdd(acc, d2);
    atomicAdd(acc + 1, b2);
  }
}

double rel_l2(const void* a, const void* b, int64_t n, double* d_acc) {
  H3RT_CUDA_CHECK(cudaMemset(d_acc, 0, 2 * sizeof(double)));
  diff_kernel<<<1024, 256>>>(static_cast<const __nv_bfloat16*>(a),
                             static_cast<const __nv_bfloat16*>(b), n, d_acc);
  H3RT_CUDA_CHECK(cudaGetLastError());
  double h[2] = {0, 0};
  H3RT_CUDA_CHECK(cudaMemcpy(h, d_acc, sizeof(h), cudaMemcpyDeviceToHost));
  return std::sqrt(h[0] / h[1]);
}

template <typename F>
double median_ms(int warmup, int iters, F&& f) {
  cudaEvent_t a, b;
  H3RT_CUDA_CHECK(cudaEventCreate(&a));
  H3RT_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) f();
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    H3RT_CUDA_CHECK(cudaEventRecord(a));
    f();
    H3RT_CUDA_CHECK(cudaEventRecord(b));
    H3RT_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    H3RT_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Device scratch owned by the returned tensor: freed when it goes out of scope, also when a
// check throws half-way.
Tensor device_bytes(size_t n) {
  return cuda::device_empty(DType::u8, {static_cast<int64_t>(n)});
}

// `call` (pre-pass + kernel) back to back for opt.sustain_seconds: one line, the JSON object.
nlohmann::json sustained_calls(const AttentionBenchOptions& opt, const char* name, double call_ms,
                               const std::function<void()>& call) {
  TelemetrySampler t(make_nvml_telemetry(current_device_info().pci_bus_id));
  t.start();
  const SustainedRun r = run_sustained(t, call_ms, opt.sustain_seconds, call, nullptr);
  t.stop();
  const nlohmann::json header = t.header_json();
  std::printf(
      "kernel %-16s: sustained, %d calls back to back, %.3f ms each (short median %.3f): "
      "%s\n",
      name, r.energy.units, r.wall_ms / r.energy.units, call_ms,
      telemetry_line(header, r.power, r.energy, "call").c_str());
  nlohmann::json j = sustained_json(r, "call");
  j["telemetry"] = header;
  j["short_median_ms"] = call_ms;
  return j;
}

// Dense Sage (automatic kernel) against router + block-sparse kernel on the same pre-pass buffers;
// `dense` receives the dense output. Prints one block of lines, returns the JSON fields.
nlohmann::json sparse_bench(const AttentionBenchOptions& opt, const attention_sage::SageBuffers& b,
                            const void* qkv, void* out, void* dense, double* d_acc, double pre_ms) {
  using namespace h3rt::attention_sage;
  namespace sp = h3rt::attention_sparse;
  const int64_t S = opt.seq, H = opt.heads, span = H * kHeadDim;
  const SageVariant v = sage_resolve_variant(SageVariant::automatic);
  SparseAttention cfg;
  cfg.tau = opt.sparse_tau;
  cfg.band = opt.sparse_band;
  cfg.max_blocks = opt.sparse_max_blocks;
  sp::RouterCudaParams r;
  r.q = static_cast<const __nv_bfloat16*>(qkv);
  r.k = r.q + span;
  r.q_row_stride = r.k_row_stride = 3 * span;
  const int64_t prefix = std::min(opt.sparse_prefix_rows, S);
  r.shape = {S, H, kHeadDim, sage_query_tile(v), prefix};
  r.cfg = cfg;
  const Tensor ws = device_bytes(sp::router_workspace_bytes(r.shape));
  const Tensor stats = device_bytes(2 * sizeof(unsigned long long));
  r.workspace = ws.data();
  r.workspace_bytes = ws.nbytes();
  auto route = [&] { H3RT_CUDA_CHECK(sp::route_cuda(r, nullptr)); };
  SageAttentionParams dp{b, S, H, dense, span, v};
  SageAttentionParams spp = dp;
  spp.out = out;
  spp.blocks = sp::router_lists(ws.data(), r.shape);
  auto dense_call = [&] { H3RT_CUDA_CHECK(sage_attention(dp, nullptr)); };
  auto sparse_call = [&] { H3RT_CUDA_CHECK(sage_attention(spp, nullptr)); };
  const double dense_ms = median_ms(opt.warmup, opt.iters, dense_call);
  const double route_ms = median_ms(opt.warmup, opt.iters, route);
  const double sparse_ms = median_ms(opt.warmup, opt.iters, sparse_call);
  // One counted routing for the fraction.
  H3RT_CUDA_CHECK(cudaMemset(stats.data(), 0, stats.nbytes()));
  r.stats = static_cast<unsigned long long*>(stats.data());
  route();
  sparse_call();
  unsigned long long n[2] = {0, 0};
  H3RT_CUDA_CHECK(cudaMemcpy(n, stats.data(), sizeof(n), cudaMemcpyDeviceToHost));
  const double fraction = n[1] ? double(n[0]) / double(n[1]) : 1.0;
  const double err = rel_l2(out, dense, S * span, d_acc);
  const double speedup = (dense_ms + pre_ms) / (pre_ms + route_ms + sparse_ms);
  std::printf(
      "sparse (%s, tau %.3g, prefix %lld, band %d, max_blocks %lld): computed %.2f%% of key "
      "blocks\n  dense kernel %.3f ms | router %.3f ms (%.1f%% of dense) | sparse kernel %.3f ms | "
      "pre-pass + router + sparse %.3f ms vs pre-pass + dense %.3f ms: %.2fx | rel L2 vs dense "
      "Sage %.4f (N(0,1) inputs: not a quality figure)\n",
      sage_variant_name(v), double(cfg.tau), static_cast<long long>(prefix), cfg.band,
      static_cast<long long>(cfg.max_blocks), 100.0 * fraction, dense_ms, route_ms,
      100.0 * route_ms / dense_ms, sparse_ms, pre_ms + route_ms + sparse_ms, pre_ms + dense_ms,
      speedup, err);
  return {{"variant", sage_variant_name(v)},
          {"tau", cfg.tau},
          {"prefix_rows", prefix},
          {"band", cfg.band},
          {"max_blocks", cfg.max_blocks},
          {"computed_fraction", fraction},
          {"dense_kernel_ms", dense_ms},
          {"router_ms", route_ms},
          {"sparse_kernel_ms", sparse_ms},
          {"sparse_total_ms", pre_ms + route_ms + sparse_ms},
          {"dense_total_ms", pre_ms + dense_ms},
          {"speedup", speedup},
          {"rel_l2_vs_dense_sage", err}};
}

}  // namespace

int run_attention_bench(const AttentionBenchOptions& opt) {
  cuda::require_cuda_device("bench attention");
  using namespace h3rt::attention_sage;
  H3RT_CHECK(opt.seq > 0 && opt.heads > 0 && opt.iters > 0, "attention bench: bad options");
  const int64_t S = opt.seq, H = opt.heads, stride = 3 * H * kHeadDim;
  cudaDeviceProp prop{};
  H3RT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t buf_bytes = sage_buffer_bytes(S, H);
  const int64_t out_elems = S * H * kHeadDim;
  const Tensor qkv_t = device_bytes(S * stride * 2), buf_t = device_bytes(buf_bytes);
  const Tensor out_t = device_bytes(out_elems * 2), ref_t = device_bytes(out_elems * 2);
  const Tensor acc_t = device_bytes(2 * sizeof(double));
  void *qkv = qkv_t.data(), *buf = buf_t.data(), *out = out_t.data(), *ref = ref_t.data();
  auto* d_acc = static_cast<double*>(acc_t.data());
  H3RT_CUDA_CHECK(cudaMemset(buf, 0, buf_bytes));
  fill_kernel<<<4096, 256>>>(static_cast<__nv_bfloat16*>(qkv), S * stride);
  H3RT_CUDA_CHECK(cudaGetLastError());
  SageBuffers b = sage_buffers(buf, S, H);
  SagePrepassParams pp{qkv, stride, S, H, 1.0f / std::sqrt(float(kHeadDim)), b};
  auto prepass = [&] { H3RT_CUDA_CHECK(sage_prepass(pp, nullptr)); };
  // Each pre-pass algorithm side by side (the default one is timed last, as pre_ms).
  nlohmann::json pre_algos;
  for (SagePrepassAlgo algo : {SagePrepassAlgo::two_launch, SagePrepassAlgo::fused_l2}) {
    if (std::find(opt.prepass.begin(), opt.prepass.end(), sage_prepass_algo_name(algo)) ==
        opt.prepass.end())
      continue;
    SagePrepassParams q = pp;
    q.algo = algo;
    cudaError_t e = sage_prepass(q, nullptr);
    if (e == cudaErrorNotSupported) continue;
    H3RT_CUDA_CHECK(e);
    const double ms =
        median_ms(opt.warmup, opt.iters, [&] { H3RT_CUDA_CHECK(sage_prepass(q, nullptr)); });
    pre_algos[sage_prepass_algo_name(algo)] = ms;
    std::printf("pre-pass %-10s: %.3f ms\n", sage_prepass_algo_name(algo), ms);
  }
  const double flops = 4.0 * double(S) * double(S) * kHeadDim * double(H);
  const double pre_ms = median_ms(opt.warmup, opt.iters, prepass);
  const double in_bytes = double(S) * stride * 2;
  std::printf("device: %s (sm_%d%d)  S=%lld heads=%lld  QKV row stride %lld (strided q/k/v)\n",
              prop.name, prop.major, prop.minor, static_cast<long long>(S),
              static_cast<long long>(H), static_cast<long long>(stride));
  std::printf("pre-pass (%s): %.3f ms (QKV bf16 %.2f GB)\n", sage_prepass_algo_name(pp.algo),
              pre_ms, in_bytes / 1e9);
  nlohmann::json j = {{"device", prop.name},
                      {"seq", S},
                      {"heads", H},
                      {"prepass_ms", pre_ms},
                      {"prepass_algo_ms", pre_algos},
                      {"flops", flops},
                      {"warmup", opt.warmup},
                      {"iters", opt.iters}};
  // The dense bf16 flash kernel on the same strided QKV: the reference output for the
  // agreement column (rel. L2 of each Sage kernel's output against it).
  {
    ops::AttentionCudaParams fp = ops::attention_params_from_qkv(
        static_cast<const __nv_bfloat16*>(qkv), S, H, static_cast<__nv_bfloat16*>(ref));
    auto flash = [&] { H3RT_CUDA_CHECK(ops::attention_flash_bf16_cuda(fp, nullptr)); };
    const double ms = median_ms(opt.warmup, opt.iters, flash);
    std::printf("flash bf16 (mma.sync): %.3f ms  %.1f TFLOP/s\n", ms, flops / ms / 1e9);
    j["kernel_ms"]["flash_bf16"] = ms;
  }
  prepass();
  for (SageVariant v : {SageVariant::w4, SageVariant::wgmma_pp3}) {
    SageAttentionParams ap{b, S, H, out, H * kHeadDim, v};
    const char* name = sage_variant_name(v);
    if (!opt.kernels.empty() &&
        std::find(opt.kernels.begin(), opt.kernels.end(), name) == opt.kernels.end())
      continue;
    H3RT_CUDA_CHECK(cudaMemset(out, 0xff, out_elems * 2));
    cudaError_t e = sage_attention(ap, nullptr);
    if (e == cudaErrorNotSupported) {
      std::printf("kernel %s: not supported on this device / build\n", name);
      continue;
    }
    H3RT_CUDA_CHECK(e);
    H3RT_CUDA_CHECK(cudaDeviceSynchronize());
    const double err = rel_l2(out, ref, out_elems, d_acc);
    auto attn = [&] { H3RT_CUDA_CHECK(sage_attention(ap, nullptr)); };
    const double ms = median_ms(opt.warmup, opt.iters, attn);
    std::printf(
        "kernel %-16s: %8.3f ms  %6.1f TFLOP/s | with pre-pass %8.3f ms  %6.1f TFLOP/s | "
        "rel L2 vs flash bf16 %.4f\n",
        name, ms, flops / ms / 1e9, ms + pre_ms, flops / (ms + pre_ms) / 1e9, err);
    j["kernel_ms"][name] = ms;
    j["total_ms"][name] = ms + pre_ms;
    j["rel_l2_vs_flash_bf16"][name] = err;
    if (opt.sustain_seconds > 0)
      j["sustained"][name] = sustained_calls(opt, name, ms + pre_ms, [&] {
        prepass();
        attn();
      });
  }
  if (opt.sparse_tau > 0) j["sparse"] = sparse_bench(opt, b, qkv, out, ref, d_acc, pre_ms);
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  if (!opt.json_path.empty()) write_json(opt.json_path, j);  // atomic (temp + rename)
  return 0;
}

void run_attention_on_file(const std::string& inputs, const std::string& outputs) {
  cuda::require_cuda_device("bench attention --inputs");
  using namespace h3rt::attention_sage;
  const SafetensorsFile in = SafetensorsFile::open(inputs);
  NamedTensors results;
  for (const SafetensorsEntry& e : in.entries()) {
    const int64_t cols = e.shape.size() == 2 ? e.shape[1] : 0;
    H3RT_CHECK(e.dtype == DType::bf16 && cols > 0 && cols % (3 * kHeadDim) == 0 && e.shape[0] > 0,
               inputs, ": tensor '", e.name, "' must be bf16 [S, 3*H*", kHeadDim,
               "] QKV rows (q | k | v)");
    const int64_t S = e.shape[0], H = cols / (3 * kHeadDim);
    const Tensor qkv_host = in.get(e.name);
    Tensor out_host = Tensor::zeros(DType::bf16, {S, H * kHeadDim});
    const size_t buf_bytes = sage_buffer_bytes(S, H);
    const Tensor qkv_t = device_bytes(qkv_host.nbytes()), buf_t = device_bytes(buf_bytes);
    const Tensor out_t = device_bytes(out_host.nbytes());
    void *qkv = qkv_t.data(), *buf = buf_t.data(), *out = out_t.data();
    H3RT_CUDA_CHECK(cudaMemset(buf, 0, buf_bytes));
    H3RT_CUDA_CHECK(cudaMemcpy(qkv, qkv_host.data(), qkv_host.nbytes(), cudaMemcpyHostToDevice));
    const SageBuffers b = sage_buffers(buf, S, H);
    H3RT_CUDA_CHECK(sage_prepass({qkv, cols, S, H, 1.0f / std::sqrt(float(kHeadDim)), b}, nullptr));
    H3RT_CUDA_CHECK(sage_attention({b, S, H, out, H * kHeadDim, SageVariant::automatic}, nullptr));
    H3RT_CUDA_CHECK(cudaMemcpy(out_host.data(), out, out_host.nbytes(), cudaMemcpyDeviceToHost));
    std::fprintf(stderr, "attention: %s S=%lld heads=%lld done\n", e.name.c_str(),
                 static_cast<long long>(S), static_cast<long long>(H));
    results.emplace_back(e.name, std::move(out_host));
  }
  write_safetensors(outputs, results);
}

}  // namespace h3rt::bench
