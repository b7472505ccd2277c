// Fused vs unfused NVFP4 producers at the seed shape (see nvfp4_fusion_bench.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "bench/bench_data.h"
#include "bench/nvfp4_fusion_bench.h"
#include "bench/nvfp4_fusion_bytes.h"
#include "cuda/runtime.h"
#include "formats/nvfp4_quantize.h"
#include "formats/nvfp4_quantize_fused.h"
#include "h3rt/check.h"
#include "h3rt/nvfp4.h"
#include "ops/attention/attention.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"
#include "ops/swiglu/swiglu.h"

namespace h3rt::bench {
namespace {

using bf16 = __nv_bfloat16;
using Src = Nvfp4GlobalScaleSource;

struct Dev {
  std::vector<void*> ptrs;
  ~Dev() {
    for (void* p : ptrs) cudaFree(p);
  }
  template <class T>
  T* alloc(int64_t bytes) {
    void* p = nullptr;
    H3RT_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(bytes)));
    ptrs.push_back(p);
    return static_cast<T*>(p);
  }
  bf16* filled(int64_t n, uint64_t salt, float a) {
    bf16* p = alloc<bf16>(2 * n);
    fill_hashed_bf16(p, n, n, a, false, salt, nullptr);
    return p;
  }
};

// NVFP4 output buffers for [rows, cols].
struct QBuf {
  Nvfp4Out out;
  int64_t qbytes = 0, sbytes = 0;
  QBuf(Dev& d, int64_t rows, int64_t cols, Src src) {
    qbytes = rows * cols / 2;
    sbytes = nvfp4_scales_bytes(rows, cols);
    out.qdata = d.alloc<uint8_t>(qbytes);
    out.scales = d.alloc<uint8_t>(sbytes);
    out.global_scale = d.alloc<float>(sizeof(float));
    out.source = src;
    out.workspace = d.alloc<void>(static_cast<int64_t>(nvfp4_quantize_workspace_bytes()));
    H3RT_CUDA_CHECK(cudaMemset(out.workspace, 0, nvfp4_quantize_workspace_bytes()));
  }
  void quantize(const bf16* x, int64_t rows, int64_t cols, cudaStream_t s) const {
    Nvfp4QuantizeParams p;
    p.x = x;
    p.rows = rows;
    p.cols = p.ld = cols;
    p.qdata = out.qdata;
    p.scales = out.scales;
    p.global_scale = out.global_scale;
    p.source = out.source;
    p.rule = out.rule;
    p.workspace = out.workspace;
    H3RT_CUDA_CHECK(nvfp4_quantize(p, s));
  }
};

bool identical(const QBuf& a, const QBuf& b) {
  auto get = [](const void* p, int64_t n) {
    std::vector<uint8_t> v(static_cast<size_t>(n));
    H3RT_CUDA_CHECK(cudaMemcpy(v.data(), p, v.size(), cudaMemcpyDeviceToHost));
    return v;
  };
  return get(a.out.qdata, a.qbytes) == get(b.out.qdata, b.qbytes) &&
         get(a.out.scales, a.sbytes) == get(b.out.scales, b.sbytes) &&
         get(a.out.global_scale, 4) == get(b.out.global_scale, 4);
}

struct Timer {
  cudaStream_t st;
  cudaEvent_t e0, e1;
  Timer() {
    H3RT_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    H3RT_CUDA_CHECK(cudaEventCreate(&e0));
    H3RT_CUDA_CHECK(cudaEventCreate(&e1));
  }
  ~Timer() {
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(st);
  }
  float once_ms(const std::function<void()>& f) {
    H3RT_CUDA_CHECK(cudaEventRecord(e0, st));
    f();
    H3RT_CUDA_CHECK(cudaEventRecord(e1, st));
    H3RT_CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    H3RT_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    return t;
  }
  // Medians of the sequences fs, timed interleaved (one run of each per iteration), so clock
  // and temperature drift during the measurement affects all of them alike.
  std::vector<double> medians_ms(const std::vector<std::function<void()>>& fs, int warmup,
                                 int iters) {
    for (int i = 0; i < warmup; ++i)
      for (const auto& f : fs) f();
    std::vector<std::vector<float>> ms(fs.size());
    for (int i = 0; i < iters; ++i)
      for (size_t k = 0; k < fs.size(); ++k) ms[k].push_back(once_ms(fs[k]));
    std::vector<double> med;
    for (auto& v : ms) {
      std::sort(v.begin(), v.end());
      med.push_back(v[v.size() / 2]);
    }
    return med;
  }
};

// One producer: how to run it with bf16 out only, or with an NVFP4 output (bf16 out null).
struct Producer {
  std::string name;
  int64_t rows, cols;
  bool computed_ok;
  std::function<void(const bf16* /*unused*/, cudaStream_t)> bf16_only;
  std::function<void(const Nvfp4Out&, cudaStream_t)> fused;
  const bf16* out;                          // where bf16_only writes
  std::function<void(cudaStream_t)> reset;  // restores inputs a run modifies (may be empty)
};

// A producer launched as launch(params, stream), params P with a bf16 output member
// (`out_field`) and an `nvfp4` block: bf16 into `out`, or NVFP4 only.
template <class P, class Launch>
Producer producer_of(const char* name, int64_t rows, int64_t cols, bool computed_ok, bf16* out,
                     const P& base, bf16* P::*out_field, Launch launch) {
  Producer pr{name, rows, cols, computed_ok, nullptr, nullptr, out, nullptr};
  pr.bf16_only = [=](const bf16*, cudaStream_t s) {
    P q = base;
    q.*out_field = out;
    H3RT_CUDA_CHECK(launch(q, s));
  };
  pr.fused = [=](const Nvfp4Out& o, cudaStream_t s) {
    P q = base;
    q.*out_field = nullptr;
    q.nvfp4 = o;
    H3RT_CUDA_CHECK(launch(q, s));
  };
  return pr;
}

nlohmann::json bench_producer(Dev& d, Timer& t, const Producer& pr, int warmup, int iters) {
  nlohmann::json j = {{"producer", pr.name}, {"rows", pr.rows}, {"cols", pr.cols}};
  for (const Src src : {Src::kGiven, Src::kTwoPass}) {
    if (src == Src::kTwoPass && !pr.computed_ok) continue;
    const char* mode = src == Src::kGiven ? "given_g" : "computed_g";
    QBuf ref(d, pr.rows, pr.cols, src), fus(d, pr.rows, pr.cols, src);
    if (src == Src::kGiven) {  // a realistic g: the computed one of this output
      QBuf probe(d, pr.rows, pr.cols, Src::kTwoPass);
      pr.bf16_only(nullptr, t.st);
      probe.quantize(pr.out, pr.rows, pr.cols, t.st);
      H3RT_CUDA_CHECK(cudaMemcpyAsync(ref.out.global_scale, probe.out.global_scale, 4,
                                      cudaMemcpyDeviceToDevice, t.st));
      H3RT_CUDA_CHECK(cudaMemcpyAsync(fus.out.global_scale, probe.out.global_scale, 4,
                                      cudaMemcpyDeviceToDevice, t.st));
    }
    const std::vector<double> m = t.medians_ms({[&] { pr.bf16_only(nullptr, t.st); },
                                                [&] {
                                                  pr.bf16_only(nullptr, t.st);
                                                  ref.quantize(pr.out, pr.rows, pr.cols, t.st);
                                                },
                                                [&] { pr.fused(fus.out, t.st); }},
                                               warmup, iters);
    const double prod = m[0], unf = m[1], fu = m[2];
    // The identity check runs both once more on the same inputs.
    if (pr.reset) pr.reset(t.st);
    pr.bf16_only(nullptr, t.st);
    ref.quantize(pr.out, pr.rows, pr.cols, t.st);
    if (pr.reset) pr.reset(t.st);
    pr.fused(fus.out, t.st);
    H3RT_CUDA_CHECK(cudaStreamSynchronize(t.st));
    const bool same = identical(ref, fus);
    std::printf(
        "  %-24s %-10s bf16 producer %9.4f ms  unfused %9.4f ms  fused %9.4f ms  (%.2fx)  "
        "bytes identical: %s\n",
        pr.name.c_str(), mode, prod, unf, fu, unf / fu, same ? "yes" : "NO");
    j[mode] = {{"bf16_producer_ms", prod},
               {"unfused_ms", unf},
               {"fused_ms", fu},
               {"speedup", unf / fu},
               {"identical_bytes", same}};
  }
  return j;
}

}  // namespace

nlohmann::json run_nvfp4_fusion_bench(const Nvfp4FusionBenchOptions& o) {
  cuda::require_cuda_device("bench nvfp4-fusion");
  H3RT_CHECK(o.rows > 0 && o.hidden % 16 == 0 && o.ffn % 16 == 0 && o.iters >= 1,
             "nvfp4-fusion bench: bad options");
  int dev = 0;
  cudaDeviceProp prop{};
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  H3RT_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  const int64_t S = o.rows, H = o.hidden, F = o.ffn, I = o.heads * 128, T = 3;
  Dev d;
  Timer t;
  // rmsnorm_modulate inputs: x, residual, tables [3T, H] (shift | scale | gate), weight, index.
  bf16* x = d.filled(S * H, 11, 4.0f);
  bf16* res = d.filled(S * H, 12, 0.05f);  // small: x barely drifts over the repeated += runs
  bf16* tab = d.filled(3 * T * H, 13, 0.5f);
  bf16* w = d.filled(H, 14, 1.5f);
  std::vector<int64_t> idx(S);
  for (int64_t r = 0; r < S; ++r) idx[r] = r % T;
  int64_t* di = d.alloc<int64_t>(S * 8);
  H3RT_CUDA_CHECK(cudaMemcpy(di, idx.data(), S * 8, cudaMemcpyHostToDevice));
  bf16* y = d.alloc<bf16>(2 * S * H);
  bf16* fc1 = d.filled(S * 2 * F, 15, 6.0f);
  bf16* act = d.alloc<bf16>(2 * S * F);
  ops::RmsNormModulateCudaParams np;
  np.x = x;
  np.weight = w;
  np.shift = tab;
  np.scale = tab + T * H;
  np.row_table_index = di;
  np.table_row_stride = H;
  np.rows = S;
  np.dim = H;
  np.eps = 1e-6f;
  ops::RmsNormModulateCudaParams rp = np;
  rp.residual = res;
  rp.residual_gate = tab + 2 * T * H;
  ops::SwigluCudaParams sp;
  sp.in = fc1;
  sp.rows = S;
  sp.ffn = F;

  auto norm_producer = [&](const char* name, const ops::RmsNormModulateCudaParams& base) {
    return producer_of(name, S, H, true, y, base, &ops::RmsNormModulateCudaParams::y,
                       ops::rmsnorm_modulate_cuda);
  };
  std::vector<Producer> producers;
  producers.push_back(norm_producer("norm1_modulate->qkv", np));
  producers.push_back(norm_producer("res_norm2_modulate->fc1", rp));
  bf16* x0 = d.alloc<bf16>(2 * S * H);  // the residual variant updates x in place
  H3RT_CUDA_CHECK(cudaMemcpy(x0, x, 2 * S * H, cudaMemcpyDeviceToDevice));
  producers.back().reset = [x, x0, S, H](cudaStream_t s) {
    H3RT_CUDA_CHECK(cudaMemcpyAsync(x, x0, 2 * S * H, cudaMemcpyDeviceToDevice, s));
  };
  auto swiglu_producer = [&](const char* name, const ops::SwigluCudaParams& base,
                             bool computed_ok) {
    return producer_of(name, S, F, computed_ok, act, base, &ops::SwigluCudaParams::out,
                       ops::swiglu_cuda);
  };
  producers.push_back(swiglu_producer("swiglu->fc2", sp, true));
  // The block's SwiGLU: the silu table kernel (given g; a computed g runs the row kernel above).
  bf16* silu = d.alloc<bf16>(2 * ops::kSiluTableEntries);
  H3RT_CUDA_CHECK(ops::swiglu_silu_table_cuda(silu, nullptr));
  ops::SwigluCudaParams spt = sp;
  spt.silu_table = silu;
  producers.push_back(swiglu_producer("swiglu(table)->fc2", spt, false));

  H3RT_CUDA_CHECK(cudaDeviceSynchronize());  // the fills ran on the legacy stream
  std::printf("nvfp4 fusion at S=%lld H=%lld I=%lld F=%lld on %s (median of %d; attention %d)\n",
              (long long)S, (long long)H, (long long)I, (long long)F, prop.name, o.iters,
              o.attention_iters);
  nlohmann::json results = nlohmann::json::array();
  for (const Producer& p : producers) results.push_back(bench_producer(d, t, p, o.warmup, o.iters));

  if (o.attention) {
    bf16* qkv = d.filled(S * 3 * I, 16, 3.0f);
    bf16* ao = d.alloc<bf16>(2 * S * I);
    const ops::AttentionCudaParams ap = ops::attention_params_from_qkv(qkv, S, o.heads, ao);
    H3RT_CUDA_CHECK(cudaDeviceSynchronize());
    // Both attention kernels; the Sage runs include its pre-pass (the same in every sequence).
    const size_t ws_bytes = ops::attention_workspace_bytes(ap, ops::AttentionKernel::sage_8bit);
    void* ws = d.alloc<void>(static_cast<int64_t>(ws_bytes));
    H3RT_CUDA_CHECK(cudaMemset(ws, 0, ws_bytes));
    for (const auto kernel : {ops::AttentionKernel::flash_bf16, ops::AttentionKernel::sage_8bit}) {
      ops::AttentionCudaParams base = ap;
      base.workspace = ws;
      base.workspace_bytes = ws_bytes;
      const bool sage = kernel == ops::AttentionKernel::sage_8bit;
      const Producer at = producer_of(sage ? "sage_attention->out_proj" : "attention->out_proj", S,
                                      I, false, ao, base, &ops::AttentionCudaParams::out,
                                      [kernel](const ops::AttentionCudaParams& q, cudaStream_t s) {
                                        return ops::attention_cuda(q, kernel, s);
                                      });
      results.push_back(bench_producer(d, t, at, 1, o.attention_iters));
    }
  }

  Nvfp4FusionShape shape;
  shape.rows = S;
  shape.hidden = H;
  shape.heads = o.heads;
  shape.ffn = F;
  const Nvfp4FusionBytes bytes = nvfp4_fusion_bytes(shape);
  nlohmann::json bj = nlohmann::json::array();
  for (const auto& b : bytes.boundaries) {
    std::printf("  bytes saved per block  %-30s given g %11lld  computed g %11lld\n",
                b.name.c_str(), (long long)b.saved_given, (long long)b.saved_computed);
    bj.push_back({{"boundary", b.name},
                  {"rows", b.rows},
                  {"cols", b.cols},
                  {"bf16_write", b.bf16_write},
                  {"quant_read_given", b.quant_read_given},
                  {"quant_read_two_pass", b.quant_read_two_pass},
                  {"producer_reread", b.producer_reread},
                  {"computed_fused", b.computed_fused},
                  {"saved_given", b.saved_given},
                  {"saved_computed", b.saved_computed}});
  }
  std::printf("  bytes saved per block  total: given g %lld, computed g %lld\n",
              (long long)bytes.saved_given, (long long)bytes.saved_computed);
  return {{"bench", "nvfp4_fusion"},
          {"device", prop.name},
          {"rows", S},
          {"hidden", H},
          {"inner", I},
          {"ffn", F},
          {"iters", o.iters},
          {"results", results},
          {"bytes_saved_per_block", bj},
          {"bytes_saved_per_block_given", bytes.saved_given},
          {"bytes_saved_per_block_computed", bytes.saved_computed}};
}

}  // namespace h3rt::bench
