#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <utility>
#include <vector>

#include "bench/block_kernels_bench.h"
#include "bench/gemm_bench_util.h"
#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "ops/attention/attention.h"
#include "ops/gated_residual/gated_residual.h"
#include "ops/linear/linear.h"
#include "ops/qk_norm_rope/qk_norm_rope.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"
#include "ops/swiglu/swiglu.h"

namespace h3rt::bench {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kSets = 3;  // rotated input sets

// Deterministic pseudo-random fill (a hash of the index), values in [-amp, amp).
__global__ void fill_bf16_kernel(bf16* p, int64_t n, uint32_t seed, float amp) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9E3779B1u ^ seed ^ uint32_t(i >> 32) * 0x85EBCA77u;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    p[i] = __float2bfloat16((float(h & 0xffffff) / 8388608.0f - 1.0f) * amp);
  }
}

__global__ void fill_f32_kernel(float* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __sinf(float((i * 2654435761u) ^ seed));
}

__global__ void index_kernel(int64_t* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = (i % 3) * 3 + (i / 7) % 3;  // 3 timesteps x 3 modality tags
}
// The seed's packed sequence instead: 100 text rows, 414 audio rows, then video, one timestep.
__global__ void segment_index_kernel(int64_t* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = i < 100 ? 0 : i < 514 ? 1 : 2;
}

Tensor dev_bf16(Shape shape, uint32_t seed, float amp = 1.0f) {
  Tensor t = cuda::device_empty(DType::bf16, std::move(shape));
  fill_bf16_kernel<<<1024, 256>>>(static_cast<bf16*>(t.data()), t.numel(), seed, amp);
  H3RT_CUDA_CHECK(cudaGetLastError());
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());  // the timed stream does not order after stream 0
  return t;
}

bf16* B(const Tensor& t) {
  return static_cast<bf16*>(t.data());
}

// Median / min over `iters` timed launches of fn(i) after `warmup` untimed ones.
struct Timing {
  double median_ms, min_ms;
};

Timing time_it(const BlockKernelsBenchOptions& o, cudaStream_t s,
               const std::function<void(int)>& fn) {
  for (int i = 0; i < o.warmup; ++i) fn(i);
  std::vector<cudaEvent_t> ev(2 * o.iters);
  for (auto& e : ev) H3RT_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < o.iters; ++i) {
    H3RT_CUDA_CHECK(cudaEventRecord(ev[2 * i], s));
    fn(o.warmup + i);
    H3RT_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], s));
  }
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<double> ms(o.iters);
  for (int i = 0; i < o.iters; ++i) {
    float t = 0.0f;
    H3RT_CUDA_CHECK(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
    ms[i] = t;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  return {n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]), ms.front()};
}

void check(cudaError_t e, const char* what) {
  H3RT_CHECK(e == cudaSuccess, "bench: ", what, " failed: ", cudaGetErrorString(e));
}

// copy_gbps > 0 (the d2d copy of this run): also the share of the copy bandwidth.
nlohmann::json mem_entry(const std::string& name, double bytes, const Timing& t,
                         double copy_gbps = 0.0) {
  const double gbps = bytes / t.median_ms * 1e-6;
  nlohmann::json j = {{"name", name},
                      {"ms_median", t.median_ms},
                      {"ms_min", t.min_ms},
                      {"bytes", bytes},
                      {"gbps", gbps}};
  if (copy_gbps > 0.0) {
    j["pct_of_copy"] = 100.0 * gbps / copy_gbps;
    std::printf("  %-40s %9.3f ms  %8.1f GB/s  %5.1f%% of copy\n", name.c_str(), t.median_ms, gbps,
                100.0 * gbps / copy_gbps);
  } else {
    std::printf("  %-40s %9.3f ms  %8.1f GB/s\n", name.c_str(), t.median_ms, gbps);
  }
  return j;
}

nlohmann::json flop_entry(const std::string& name, double flops, const Timing& t,
                          nlohmann::json extra = {}) {
  std::printf("  %-28s %9.3f ms  %8.1f TFLOP/s\n", name.c_str(), t.median_ms,
              flops / t.median_ms * 1e-9);
  nlohmann::json j = {{"name", name},
                      {"ms_median", t.median_ms},
                      {"ms_min", t.min_ms},
                      {"flops", flops},
                      {"tflops", flops / t.median_ms * 1e-9}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

nlohmann::json bench_memory_bound(const BlockKernelsBenchOptions& o, cudaStream_t s) {
  const int64_t S = o.rows, H = o.hidden, I = o.heads * 128, F = o.ffn;
  nlohmann::json out = nlohmann::json::array();
  const double bf = 2.0;
  double copy_gbps = 0.0;
  {
    Tensor a = cuda::device_empty(DType::u8, {int64_t(1) << 30});
    Tensor b = cuda::device_empty(DType::u8, {int64_t(1) << 30});
    Timing t = time_it(o, s, [&](int) {
      check(cudaMemcpyAsync(b.data(), a.data(), a.nbytes(), cudaMemcpyDeviceToDevice, s), "copy");
    });
    out.push_back(mem_entry("d2d_copy_1GiB", 2.0 * a.nbytes(), t));
    copy_gbps = out.back()["gbps"].get<double>();
  }
  Tensor table = dev_bf16({9, 6 * H}, 7, 0.5f), w = dev_bf16({H}, 8, 1.0f);
  Tensor idx = cuda::device_empty(DType::i64, {S});
  index_kernel<<<256, 256, 0, s>>>(static_cast<int64_t*>(idx.data()), S);
  H3RT_CUDA_CHECK(cudaGetLastError());
  std::vector<Tensor> x, y, n;
  for (int k = 0; k < kSets; ++k) {
    x.push_back(dev_bf16({S, H}, 100 + k, 2.0f));
    y.push_back(dev_bf16({S, H}, 200 + k, 2.0f));
    n.push_back(cuda::device_empty(DType::bf16, {S, H}));
  }
  ops::RmsNormModulateCudaParams rp;
  rp.weight = B(w);
  rp.shift = B(table);
  rp.scale = B(table) + H;
  rp.row_table_index = static_cast<int64_t*>(idx.data());
  rp.rows = S;
  rp.dim = H;
  rp.table_row_stride = 6 * H;
  // Rows take their table row from a 9-way interleave (a new table row almost every row), then
  // from the seed's segments as in the model (runs of one table row).
  Tensor seg_idx = cuda::device_empty(DType::i64, {S});
  segment_index_kernel<<<256, 256, 0, s>>>(static_cast<int64_t*>(seg_idx.data()), S);
  H3RT_CUDA_CHECK(cudaGetLastError());
  for (const bool segments : {false, true}) {
    H3RT_NVTX_RANGE("bench.rmsnorm_modulate");
    Timing t = time_it(o, s, [&](int i) {
      auto p = rp;
      p.x = B(x[i % kSets]);
      p.y = B(n[i % kSets]);
      if (segments) p.row_table_index = static_cast<int64_t*>(seg_idx.data());
      check(ops::rmsnorm_modulate_cuda(p, s), "rmsnorm_modulate");
    });
    const std::string name = std::string("rmsnorm_modulate") + (segments ? " (seed segments)" : "");
    out.push_back(mem_entry(name, 2 * bf * S * H, t, copy_gbps));
  }
  {
    H3RT_NVTX_RANGE("bench.gated_residual");
    Timing t = time_it(o, s, [&](int i) {
      ops::GatedResidualCudaParams p;
      p.x = B(x[i % kSets]);
      p.y = B(y[i % kSets]);
      p.gate = B(table) + 2 * H;
      p.row_table_index = rp.row_table_index;
      p.rows = S;
      p.dim = H;
      p.table_row_stride = 6 * H;
      check(ops::gated_residual_cuda(p, s), "gated_residual");
    });
    out.push_back(mem_entry("gated_residual", 3 * bf * S * H, t, copy_gbps));
  }
  {
    H3RT_NVTX_RANGE("bench.residual_rmsnorm_modulate");
    Timing t = time_it(o, s, [&](int i) {
      auto p = rp;
      p.x = B(x[i % kSets]);
      p.y = B(n[i % kSets]);
      p.residual = B(y[i % kSets]);
      p.residual_gate = B(table) + 2 * H;
      check(ops::rmsnorm_modulate_cuda(p, s), "fused residual+rmsnorm");
    });
    out.push_back(
        mem_entry("gated_residual+rmsnorm_modulate (fused)", 4 * bf * S * H, t, copy_gbps));
  }
  x.clear();
  y.clear();
  n.clear();
  {
    H3RT_NVTX_RANGE("bench.qk_norm_rope");
    std::vector<Tensor> qkv;
    for (int k = 0; k < kSets; ++k) qkv.push_back(dev_bf16({S, 3 * I}, 300 + k, 2.0f));
    Tensor cs = cuda::device_empty(DType::f32, {S, 96}),
           sn = cuda::device_empty(DType::f32, {S, 96});
    fill_f32_kernel<<<256, 256, 0, s>>>(static_cast<float*>(cs.data()), cs.numel(), 1);
    fill_f32_kernel<<<256, 256, 0, s>>>(static_cast<float*>(sn.data()), sn.numel(), 2);
    H3RT_CUDA_CHECK(cudaGetLastError());
    Tensor qw = dev_bf16({128}, 9, 1.0f), kw = dev_bf16({128}, 10, 1.0f);
    // {slots, ring}: the per-(row, head group) kernel at each slot count, then the ring kernel
    // (the default; qk_norm_rope.h), same bytes.
    const std::pair<int, bool> configs[] = {{0, false}, {7, false}, {2, false}, {0, true}};
    for (const auto& [slots, ring] : configs) {
      Timing t = time_it(o, s, [&](int i) {
        ops::QkNormRopeCudaParams p;
        p.qkv = B(qkv[i % kSets]);
        p.row_stride = 3 * I;
        p.q_offset = 0;
        p.k_offset = I;
        p.rows = S;
        p.heads = o.heads;
        p.q_weight = B(qw);
        p.k_weight = B(kw);
        p.cos = static_cast<float*>(cs.data());
        p.sin = static_cast<float*>(sn.data());
        p.slots = slots;
        p.ring = ring;
        check(ops::qk_norm_rope_cuda(p, s), "qk_norm_rope");
      });
      const std::string name = ring ? std::string("qk_norm_rope (ring, default)")
                               : slots
                                   ? "qk_norm_rope (per row, " + std::to_string(slots) + " slots)"
                                   : std::string("qk_norm_rope (per row)");
      out.push_back(mem_entry(name, 4 * bf * S * I + 2.0 * S * 96 * 4, t, copy_gbps));
    }
  }
  {
    std::vector<Tensor> h, g;
    for (int k = 0; k < kSets; ++k) {
      h.push_back(dev_bf16({S, 2 * F}, 400 + k, 4.0f));
      g.push_back(cuda::device_empty(DType::bf16, {S, F}));
    }
    Tensor table = cuda::device_empty(DType::bf16, {ops::kSiluTableEntries});
    check(ops::swiglu_silu_table_cuda(B(table), s), "swiglu table");
    // The block's default (silu table), then the two math paths.
    const std::pair<int, const char*> modes[] = {
        {0, "swiglu (silu table, default)"}, {1, "swiglu (exact exp)"}, {2, "swiglu (fast exp)"}};
    for (const auto& [mode, name] : modes) {
      H3RT_NVTX_RANGE("bench.swiglu");
      Timing t = time_it(o, s, [&](int i) {
        ops::SwigluCudaParams p;
        p.in = B(h[i % kSets]);
        p.out = B(g[i % kSets]);
        p.rows = S;
        p.ffn = F;
        p.exact_exp = mode != 2;
        p.silu_table = mode == 0 ? B(table) : nullptr;
        check(ops::swiglu_cuda(p, s), "swiglu");
      });
      out.push_back(mem_entry(name, 3 * bf * S * F, t, copy_gbps));
    }
  }
  return out;
}

nlohmann::json bench_gemm(const BlockKernelsBenchOptions& o, cudaStream_t s) {
  const int64_t S = o.rows, H = o.hidden, I = o.heads * 128, F = o.ffn;
  struct Shape3 {
    const char* name;
    int64_t in, out;
  };
  const Shape3 shapes[] = {{"qkv", H, 3 * I}, {"out_proj", I, H}, {"fc1", H, 2 * F}, {"fc2", F, H}};
  nlohmann::json out = nlohmann::json::array();
  Tensor xs = cuda::device_empty(DType::f32, {1}), ws = cuda::device_empty(DType::f32, {1});
  const float one = 1.0f, wsc = 0.01f;
  H3RT_CUDA_CHECK(cudaMemcpy(xs.data(), &one, 4, cudaMemcpyHostToDevice));
  H3RT_CUDA_CHECK(cudaMemcpy(ws.data(), &wsc, 4, cudaMemcpyHostToDevice));
  for (const auto& sh : shapes) {
    H3RT_NVTX_RANGE(sh.name);
    const double flops = 2.0 * S * sh.in * sh.out;
    std::vector<Tensor> x;
    for (int k = 0; k < 2; ++k) x.push_back(dev_bf16({S, sh.in}, 500 + k, 2.0f));
    Tensor w = dev_bf16({sh.out, sh.in}, 600, 0.05f);
    Tensor y = cuda::device_empty(DType::bf16, {S, sh.out});
    Timing t = time_it(o, s, [&](int i) {
      ops::LinearCudaParams p;
      p.x = B(x[i % 2]);
      p.w = B(w);
      p.y = B(y);
      p.rows = S;
      p.in = sh.in;
      p.out = sh.out;
      check(ops::linear_bf16_cuda(p, s), "linear_bf16");
    });
    nlohmann::json shape = {{"m", S}, {"k", sh.in}, {"n", sh.out}};
    out.push_back(flop_entry(std::string("bf16 ") + sh.name, flops, t, {{"shape", shape}}));

    // fp8: quantize the activation (timed separately), e4m3 weights (bytes of the bf16 fill).
    std::vector<Tensor> xq;
    for (int k = 0; k < 2; ++k) xq.push_back(cuda::device_empty(DType::e4m3, {S, sh.in}));
    Tensor wq = cuda::device_empty(DType::e4m3, {sh.out, sh.in});
    ops::QuantizeE4m3CudaParams qw;
    qw.x = B(w);
    qw.q = static_cast<__nv_fp8_e4m3*>(wq.data());
    qw.scale = static_cast<float*>(ws.data());
    qw.rows = sh.out;
    qw.cols = sh.in;
    check(ops::quantize_e4m3_cuda(qw, s), "quantize weights");
    Timing tq = time_it(o, s, [&](int i) {
      ops::QuantizeE4m3CudaParams q;
      q.x = B(x[i % 2]);
      q.q = static_cast<__nv_fp8_e4m3*>(xq[i % 2].data());
      q.scale = static_cast<float*>(xs.data());
      q.rows = S;
      q.cols = sh.in;
      check(ops::quantize_e4m3_cuda(q, s), "quantize_e4m3");
    });
    out.push_back(
        mem_entry((std::string("quantize_e4m3 ") + sh.name).c_str(), 3.0 * S * sh.in, tq));
    for (bool fast : {false, true}) {
      Timing t8 = time_it(o, s, [&](int i) {
        ops::LinearFp8CudaParams p;
        p.x = static_cast<__nv_fp8_e4m3*>(xq[i % 2].data());
        p.w = static_cast<__nv_fp8_e4m3*>(wq.data());
        p.x_scale = static_cast<float*>(xs.data());
        p.w_scale = static_cast<float*>(ws.data());
        p.y = B(y);
        p.rows = S;
        p.in = sh.in;
        p.out = sh.out;
        p.fast_accum = fast;
        check(ops::linear_fp8_cuda(p, s), "linear_fp8");
      });
      out.push_back(flop_entry(std::string(fast ? "fp8 fast-accum " : "fp8 ") + sh.name, flops, t8,
                               {{"shape", shape}}));
    }
  }
  return out;
}

nlohmann::json bench_attention(const BlockKernelsBenchOptions& o, cudaStream_t s) {
  const int64_t S = o.rows, I = o.heads * 128;
  H3RT_NVTX_RANGE("bench.attention");
  std::vector<Tensor> qkv;
  for (int k = 0; k < 2; ++k) qkv.push_back(dev_bf16({S, 3 * I}, 700 + k, 2.0f));
  Tensor out = cuda::device_empty(DType::bf16, {S, I});
  Timing t = time_it(o, s, [&](int i) {
    auto p = ops::attention_params_from_qkv(B(qkv[i % 2]), S, o.heads, B(out));
    check(ops::attention_cuda(p, ops::AttentionKernel::flash_bf16, s), "attention");
  });
  const double flops = 4.0 * double(S) * double(S) * 128.0 * double(o.heads);
  return flop_entry("attention flash_bf16", flops, t,
                    {{"shape", {{"S", S}, {"heads", o.heads}, {"head_dim", 128}}}});
}

}  // namespace

nlohmann::json run_block_kernels_bench(const BlockKernelsBenchOptions& o) {
  cuda::require_cuda_device("bench kernels");
  H3RT_CHECK(o.iters >= 1 && o.warmup >= 0, "bench-kernels: iters >= 1 and warmup >= 0");
  int dev = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  H3RT_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  const std::string date = utc_date();
  std::printf("bench-kernels on %s (sm_%d%d), S=%lld H=%lld heads=%lld F=%lld, median of %d\n",
              prop.name, prop.major, prop.minor, static_cast<long long>(o.rows),
              static_cast<long long>(o.hidden), static_cast<long long>(o.heads),
              static_cast<long long>(o.ffn), o.iters);
  nlohmann::json j;
  j["date"] = date;
  j["device"] = prop.name;
  j["compute_capability"] = prop.major * 10 + prop.minor;
  j["compiled_archs"] = H3RT_CUDA_ARCH_LIST;
  j["shape"] = {{"rows", o.rows}, {"hidden", o.hidden}, {"heads", o.heads}, {"ffn", o.ffn}};
  j["timing"] = {{"warmup", o.warmup},
                 {"iters", o.iters},
                 {"statistic", "median"},
                 {"rotated_input_sets", kSets}};
  j["byte_model"] =
      "DRAM bytes of one ideal pass over the activations (bf16): rmsnorm_modulate 4*S*H, "
      "fused residual+rmsnorm 8*S*H, gated_residual 6*S*H, qk_norm_rope 8*S*I + 768*S, swiglu "
      "6*S*F, quantize_e4m3 3*rows*cols; tables, weights and indices (L2-resident) not counted";
  cuda::Stream stream;
  j["memory_bound"] = bench_memory_bound(o, stream);
  cuda::default_arena().release_cached();
  if (o.gemm) j["gemm"] = bench_gemm(o, stream);
  cuda::default_arena().release_cached();
  if (o.attention) j["attention"] = bench_attention(o, stream);
  const auto st = cuda::default_arena().stats();
  j["device_memory"] = {{"peak_allocated", st.peak_allocated}, {"peak_reserved", st.peak_reserved}};
  return j;
}

}  // namespace h3rt::bench
