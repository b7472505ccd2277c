#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench/block_bench.h"
#include "bench/block_report.h"
#include "bench/launch_count.h"
#include "bench/sustained_run.h"
#include "bench/telemetry.h"
#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "h3rt/layout.h"
#include "h3rt/model.h"
#include "model/block_cuda.h"
#include "model/model_cuda.h"
#include "ops/int8_linear/int8_linear.h"
#include "ops/linear/linear.h"
#include "ops/linear_nvfp4/linear_nvfp4.h"
#include "ops/rope_table/rope_table.h"

namespace h3rt::bench {
namespace {

using bf16 = __nv_bfloat16;

__device__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// Uniform values in [center - scale, center + scale), a cheap stand-in for trained weights.
__global__ void fill_uniform(bf16* p, int64_t n, uint64_t seed, float center, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float u = hash32(seed * 0x9e3779b97f4a7c15ull + i) * (2.0f / 4294967296.0f) - 1.0f;
    p[i] = __float2bfloat16(center + scale * u);
  }
}

void fill(const Tensor& t, uint64_t seed, float center, float scale, cudaStream_t s) {
  fill_uniform<<<1024, 256, 0, s>>>(t.ptr<bf16>(), t.numel(), seed, center, scale);
  H3RT_CUDA_CHECK(cudaGetLastError());
}

Tensor device_scalar(float v) {
  return cuda::to_device(tensor_from_f32({v}, {1}));
}

// Turns a bf16 layer whose values lie in [-wmax, wmax] into an fp8_scaled one: e4m3 weights with
// w_scale = wmax / 448, and a static activation scale for inputs up to 8 in magnitude, or none
// (`dynamic`: the scale is computed from each call's activation).
void make_fp8(model::DeviceLinear& l, float wmax, bool dynamic, cudaStream_t s) {
  l.w_scale = device_scalar(wmax / 448.0f);
  if (!dynamic) l.x_scale = device_scalar(8.0f / 448.0f);
  l.w8 = cuda::device_empty(DType::e4m3, {l.out, l.in});
  ops::QuantizeE4m3CudaParams q{l.w.ptr<bf16>(), l.w8.ptr<__nv_fp8_e4m3>(), l.w_scale.ptr<float>(),
                                l.out, l.in};
  H3RT_CUDA_CHECK(ops::quantize_e4m3_cuda(q, s));
}

}  // namespace

nlohmann::json run_block_bench(const BlockBenchOptions& o) {
  cuda::require_cuda_device("bench block");
  const H3Config c = o.h3_dims ? H3Config::h3() : H3Config::tiny();
  SequenceLayout layout = make_t2va_layout(o.text_len, o.audio_len, o.frames, o.height, o.width);
  TimestepPlan plan = make_timestep_plan(layout, 0.3f, 0.631579f);
  const int64_t S = layout.seq_len(), table_rows = 3 * int64_t(plan.timestep.size());
  std::fprintf(stderr, "bench block: %lld rows, hidden %lld, %lld heads, ffn %lld\n", (long long)S,
               (long long)c.hidden, (long long)c.heads, (long long)c.ffn);

  cuda::Stream s;
  cuda::default_arena().reset_peak();
  model::DeviceBlock w;
  const int64_t H = c.hidden, I = c.inner(), F = c.ffn;
  w.norm1 = cuda::device_empty(DType::bf16, {H});
  w.norm2 = cuda::device_empty(DType::bf16, {H});
  w.q_norm = cuda::device_empty(DType::bf16, {128});
  w.k_norm = cuda::device_empty(DType::bf16, {128});
  w.qkv.w = cuda::device_empty(DType::bf16, {3 * I, H});
  w.out.w = cuda::device_empty(DType::bf16, {H, I});
  w.fc1.w = cuda::device_empty(DType::bf16, {2 * F, H});
  w.fc2.w = cuda::device_empty(DType::bf16, {H, F});
  uint64_t k = o.seed;
  for (const Tensor* t : {&w.norm1, &w.norm2, &w.q_norm, &w.k_norm}) fill(*t, ++k, 1.0f, 0.1f, s);
  fill(w.qkv.w, ++k, 0.0f, 1.0f / std::sqrt(float(H)), s);
  fill(w.out.w, ++k, 0.0f, 1.0f / std::sqrt(float(I)), s);
  fill(w.fc1.w, ++k, 0.0f, 1.0f / std::sqrt(float(H)), s);
  fill(w.fc2.w, ++k, 0.0f, 1.0f / std::sqrt(float(F)), s);

  w.qkv.out = 3 * I, w.qkv.in = H;
  w.out.out = H, w.out.in = I;
  w.fc1.out = 2 * F, w.fc1.in = H;
  w.fc2.out = H, w.fc2.in = F;
  H3RT_CHECK(o.fp8 || !o.fp8_dynamic, "bench block: fp8_dynamic needs fp8");
  if (o.fp8) {
    make_fp8(w.qkv, 1.0f / std::sqrt(float(H)), o.fp8_dynamic, s);
    make_fp8(w.out, 1.0f / std::sqrt(float(I)), o.fp8_dynamic, s);
    make_fp8(w.fc1, 1.0f / std::sqrt(float(H)), o.fp8_dynamic, s);
    make_fp8(w.fc2, 1.0f / std::sqrt(float(F)), o.fp8_dynamic, s);
  }
  H3RT_CHECK(int(o.fp8) + int(o.nvfp4) + int(o.int8_group >= 0) <= 1,
             "bench block: choose one of fp8, nvfp4 and int8");
  if (o.int8_group >= 0)
    for (model::DeviceLinear* l : {&w.qkv, &w.out, &w.fc1, &w.fc2})
      model::convert_linear_to_int8(*l, o.int8_group, s);
  if (o.nvfp4)
    for (model::DeviceLinear* l : {&w.qkv, &w.out, &w.fc1, &w.fc2}) {
      // A static input scale for activations up to 8 in magnitude, as a calibrated checkpoint.
      model::convert_linear_to_nvfp4(*l, o.nvfp4_static_input_scale ? 8.0f / 2688.0f : 0.0f, s);
    }
  model::BlockCudaBuffers b = model::make_block_buffers(
      c, S, table_rows, o.fp8, o.nvfp4,
      o.sage_attention ? ops::AttentionKernel::sage_8bit : ops::AttentionKernel::flash_bf16,
      o.int8_group >= 0);
  fill(b.x, ++k, 0.0f, 1.0f, s);
  fill(b.table, ++k, 0.0f, 0.1f, s);
  std::vector<int64_t> idx = adaln_indices(layout, plan);
  std::vector<float> inv = ops::rope_inv_freq(c.rope_freqs, c.rope_theta);
  std::vector<float> cosv(S * c.rope_dim()), sinv(S * c.rope_dim());
  ops::rope_table_cpu(
      {layout.position_ids.data(), inv.data(), cosv.data(), sinv.data(), S, c.rope_freqs});
  H3RT_CUDA_CHECK(
      cudaMemcpyAsync(b.row_index.data(), idx.data(), S * 8, cudaMemcpyHostToDevice, s));
  H3RT_CUDA_CHECK(
      cudaMemcpyAsync(b.cos.data(), cosv.data(), cosv.size() * 4, cudaMemcpyHostToDevice, s));
  H3RT_CUDA_CHECK(
      cudaMemcpyAsync(b.sin.data(), sinv.data(), sinv.size() * 4, cudaMemcpyHostToDevice, s));
  // The residual stream grows block after block; re-filling x keeps every repetition alike.
  auto reset_x = [&] { fill(b.x, o.seed, 0.0f, 1.0f, s); };

  for (int i = 0; i < o.warmup; ++i) model::block_forward_cuda(c, w, b, s);
  s.synchronize();

  // Clock and power samples are matched to components and blocks by host time: a repetition's
  // device work ends just before the synchronize that waits for it returns.
  const DeviceInfo device = current_device_info();
  TelemetrySampler telemetry(make_nvml_telemetry(device.pci_bus_id));
  telemetry.start();
  std::map<std::string, std::vector<Interval>> comp_windows;
  std::vector<Interval> block_windows;

  // Per-component times: events recorded between stages in stream order.
  std::map<std::string, std::vector<double>> comp;
  std::vector<double> instrumented, plain, graph;
  std::vector<cudaEvent_t> ev(16);
  for (auto& e : ev) H3RT_CUDA_CHECK(cudaEventCreate(&e));
  std::vector<std::string> names;
  for (int r = 0; r < o.reps; ++r) {
    reset_x();
    names.clear();
    int i = 0;
    H3RT_CUDA_CHECK(cudaEventRecord(ev[i++], s));
    model::StageHook hook = [&](const char* name) {
      names.push_back(name);
      H3RT_CUDA_CHECK(cudaEventRecord(ev[i++], s));
    };
    model::block_forward_cuda(c, w, b, s, &hook);
    s.synchronize();
    const double t_end = telemetry.now_ms();
    float total;
    H3RT_CUDA_CHECK(cudaEventElapsedTime(&total, ev[0], ev[names.size()]));
    for (size_t j = 0; j < names.size(); ++j) {
      float ms, from_start;
      H3RT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[j], ev[j + 1]));
      H3RT_CUDA_CHECK(cudaEventElapsedTime(&from_start, ev[0], ev[j]));
      comp[names[j]].push_back(ms);
      const double begin = t_end - total + from_start;
      comp_windows[names[j]].push_back({begin, begin + ms});
    }
    instrumented.push_back(total);
  }
  // Uninstrumented block (the energy counter around these), then a captured CUDA graph of it.
  BlockTelemetry tm;
  tm.block_energy.begin_mj = telemetry.energy_mj();
  for (int r = 0; r < o.reps; ++r) {
    reset_x();
    float ms;
    H3RT_CUDA_CHECK(cudaEventRecord(ev[0], s));
    model::block_forward_cuda(c, w, b, s);
    H3RT_CUDA_CHECK(cudaEventRecord(ev[1], s));
    s.synchronize();
    const double t_end = telemetry.now_ms();
    H3RT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    plain.push_back(ms);
    block_windows.push_back({t_end - ms, t_end});
  }
  tm.block_energy.end_mj = telemetry.energy_mj();
  tm.block_energy.units = o.reps;
  cudaGraph_t g;
  cudaGraphExec_t ge;
  H3RT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  model::block_forward_cuda(c, w, b, s);
  H3RT_CUDA_CHECK(cudaStreamEndCapture(s, &g));
  H3RT_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  // --sustain: the graph back to back as a sampling run's step graph chains blocks, at the
  // power limit where there is one (a refill of the input launched before each replay).
  if (o.sustain_seconds > 0)
    tm.sustained = run_sustained(
        telemetry, median(plain), o.sustain_seconds,
        [&] {
          reset_x();
          H3RT_CUDA_CHECK(cudaGraphLaunch(ge, s));
        },
        s);
  telemetry.stop();
  const std::vector<TelemetrySample> samples = telemetry.samples();
  tm.header = telemetry.header_json();
  tm.block = summarize(samples, block_windows);
  for (const auto& [name, windows] : comp_windows)
    tm.components[name] = summarize(samples, windows);
  std::fprintf(stderr, "bench block: %s\n",
               telemetry_line(tm.header, tm.block, tm.block_energy, "block").c_str());
  if (tm.sustained.wall_ms > 0)
    std::fprintf(
        stderr, "bench block: sustained, %d graph replays back to back, %.2f ms each: %s\n",
        tm.sustained.energy.units, tm.sustained.wall_ms / tm.sustained.energy.units,
        telemetry_line(tm.header, tm.sustained.power, tm.sustained.energy, "block").c_str());
  size_t graph_nodes = 0;
  H3RT_CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &graph_nodes));
  for (int r = 0; r < o.reps; ++r) {
    reset_x();
    float ms;
    H3RT_CUDA_CHECK(cudaEventRecord(ev[0], s));
    H3RT_CUDA_CHECK(cudaGraphLaunch(ge, s));
    H3RT_CUDA_CHECK(cudaEventRecord(ev[1], s));
    s.synchronize();
    H3RT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    graph.push_back(ms);
  }
  int64_t cupti_kernels = -1;  // -1: built without CUPTI
#ifdef H3RT_HAVE_CUPTI
  cupti_kernels = count_kernel_launches([&] {
    model::block_forward_cuda(c, w, b, s);
    s.synchronize();
  });
  reset_x();  // record_device_activity waits for it before recording
  const KernelTimeline timeline = kernel_timeline(record_device_activity([&] {
    H3RT_CUDA_CHECK(cudaGraphLaunch(ge, s));
    s.synchronize();
  }));
  std::fprintf(stderr,
               "bench block: one graph replay, %lld kernels: %.3f ms from the first kernel's start "
               "to the last one's end, %.1f us of it (%.2f%%) between kernels\n",
               static_cast<long long>(timeline.kernels), timeline.span_us / 1e3, timeline.idle_us,
               100.0 * timeline.idle_fraction());
#endif
  H3RT_CUDA_CHECK(cudaGraphExecDestroy(ge));
  H3RT_CUDA_CHECK(cudaGraphDestroy(g));
  for (auto& e : ev) H3RT_CUDA_CHECK(cudaEventDestroy(e));

  BlockMeasurements m;
  m.component_ms = std::move(comp);
  m.instrumented_ms = std::move(instrumented);
  m.uninstrumented_ms = std::move(plain);
  m.graph_ms = std::move(graph);
  // fp8: a quantize launcher call per projection (with dynamic scales it launches two kernels,
  // amax partials and encode, which graph_nodes and cupti_kernels count); nvfp4: none with
  // static input scales (the producers encode), one (two-pass quantizer) per projection
  // otherwise.
  // int8: one per projection whose producer does not quantize the input.
  m.fused_inputs = model::fused_projection_inputs(w);
  // fp8: one per projection whose producer does not write its e4m3 input (static scales fuse
  // qkv, fc1 and fc2 unless H3RT_FP8_FUSE=0).
  m.launcher_calls = model::kBlockLaunches +
                     (o.fp8 ? 4 - static_cast<int>(m.fused_inputs.size()) : 0) +
                     (o.nvfp4 && !o.nvfp4_static_input_scale ? 4 : 0) +
                     (o.int8_group >= 0 ? 4 - static_cast<int>(m.fused_inputs.size()) : 0) +
                     (o.sage_attention ? 1 : 0);  // Sage: pre-pass and kernel
  m.graph_nodes = static_cast<int64_t>(graph_nodes);
  m.cupti_kernels = cupti_kernels;
#ifdef H3RT_HAVE_CUPTI
  m.timeline = timeline;
#endif
  const auto mem = cuda::default_arena().stats();
  m.peak_allocated = mem.peak_allocated;
  m.peak_reserved = mem.peak_reserved;
  m.device = device;
  m.telemetry = std::move(tm);
  m.fp8 = o.fp8;
  m.nvfp4 = o.nvfp4;
  m.int8_group = o.int8_group;
  if (o.int8_group >= 0)
    for (const auto& [name, l] : {std::pair<const char*, const model::DeviceLinear*>{"qkv", &w.qkv},
                                  {"out", &w.out},
                                  {"fc1", &w.fc1},
                                  {"fc2", &w.fc2}})
      m.int8_gemm[name] = ops::int8_gemm_choice(S, l->in, l->out);
  m.sage_attention = o.sage_attention;
  m.nvfp4_static_input_scale = o.nvfp4_static_input_scale;
  if (o.nvfp4)
    m.nvfp4_algo =
        ops::linear_nvfp4_algo_name(ops::linear_nvfp4_resolve(ops::Nvfp4GemmAlgo::kAuto));
  m.seed = o.seed;
  nlohmann::json report = block_report(c, layout, m);
  if (o.fp8_dynamic)
    report["workload"]["gemm"] =
        "cuBLASLt fp8 e4m3, dynamic per-tensor activation scales (s = amax / 448 per call; "
        "the amax and quantize launches are inside each projection)";
  return report;
}

}  // namespace h3rt::bench
