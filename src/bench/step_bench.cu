#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/block_report.h"
#include "bench/device_io_forward.h"
#include "bench/launch_count.h"
#include "bench/step_bench.h"
#include "bench/step_report.h"
#include "bench/telemetry.h"
#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "h3rt/formats.h"
#include "h3rt/memory.h"
#include "h3rt/model.h"
#include "h3rt/pipeline.h"
#include "h3rt/report.h"
#include "h3rt/sampler.h"
#include "model/block_cuda.h"
#include "model/forward_session_cuda.h"
#include "model/model_cuda.h"
#include "model/synthetic_gemm_cuda.h"
#include "model/weight_stream_cuda.h"
#include "ops/linear/linear.h"
#include "ops/linear_nvfp4/linear_nvfp4.h"
#include "pipeline/device_loop.h"

namespace h3rt::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Setup {
  H3Config c;
  SequenceLayout layout;
  model::DeviceModel dev;
  double model_s = 0;
  int64_t weight_bytes = 0;
  WeightStreaming load;  // streamed_at_load, load_peak_device_bytes
  FloatVec text;
  InitialNoise noise;
};

// `resident`: the model loads whole whatever the limit (--compare-resident's first run).
Setup setup(const StepBenchOptions& o, const char* verb, bool resident = false) {
  cuda::require_cuda_device(std::string("bench ") + verb);
  Setup st;
  st.c = *config_preset(o.preset);
  st.layout = make_t2va_layout(o.text_len, o.audio_len, o.frames, o.height, o.width);
  const SequenceLayout& L = st.layout;
  std::fprintf(stderr,
               "bench %s: preset %s, %lld rows (text %lld, audio %lld, video %lld), %s GEMMs\n",
               verb, o.preset.c_str(), (long long)L.seq_len(), (long long)L.text_len,
               (long long)L.audio_rows(), (long long)L.video_rows(),
               o.fp8               ? "fp8"
               : o.nvfp4           ? "NVFP4"
               : o.int8_group >= 0 ? "int8 W8A8"
                                   : "bf16");
  H3RT_CHECK(int(o.fp8) + int(o.nvfp4) + int(o.int8_group >= 0) <= 1, "bench ", verb,
             ": choose one of fp8, nvfp4 and int8");
  const SyntheticGemm gemm = o.fp8               ? SyntheticGemm::fp8
                             : o.nvfp4           ? SyntheticGemm::nvfp4
                             : o.int8_group >= 0 ? SyntheticGemm::int8
                                                 : SyntheticGemm::bf16;
  // Under a limit the resident model cannot fit even without activations: the blocks go to
  // pinned host memory as they are made (model/weight_stream_plan.h, plan_load).
  std::optional<model::LoadPlan> lp;
  if (o.device_memory_limit > 0 && !resident)
    lp = model::plan_load(st.c, model::synthetic_block_storage(st.c, gemm),
                          model::synthetic_block_storage(st.c, SyntheticGemm::bf16),
                          o.device_memory_limit, o.sage_attention);
  const bool stream = lp && lp->stream;
  const model::LoadMeter meter;
  const auto t0 = Clock::now();
  const WeightStreamSource source = model::load_stream_source(lp, o.weight_stream_source);
  st.dev = model::make_synthetic_gemm_model(st.c, o.weights_seed, gemm, o.int8_group,
                                            stream ? &*lp : nullptr, nullptr, source);
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  st.model_s = seconds_since(t0);
  st.weight_bytes = cuda::default_arena().stats().current_allocated;
  st.load.streamed_at_load = stream;
  st.load.load_peak_device_bytes = meter.peak();
  std::fprintf(stderr,
               "bench %s: model ready in %.2f s (%.2f GB on the device, load peak %.2f GB%s)\n",
               verb, st.model_s, st.weight_bytes / 1e9, st.load.load_peak_device_bytes / 1e9,
               !stream ? ""
               : source == WeightStreamSource::pinned
                   ? "; the blocks went to pinned host memory as they were made"
                   : "; the blocks went to pageable host memory as they were made (source file)");
  // The request `h3rt sample` builds: seeded stand-in text (stream 2, bf16 values) and noise.
  st.text.resize(static_cast<size_t>(L.text_len * st.c.text_dim));
  gaussian_noise(o.seed, 2, 0, st.text.data(), static_cast<int64_t>(st.text.size()));
  for (float& x : st.text) x = round_bf16(x);
  st.noise = initial_noise(o.seed, L, st.c.in_channels, st.c.audio_channels);
  return st;
}

StepRepetition repetition(const model::ForwardStepTimes& t, const ForwardOutputs& v,
                          const SamplerStep& step) {
  StepRepetition r;
  r.wall_ms = t.wall_ms;
  r.device_ms = t.device_ms;
  r.host_prepare_ms = t.host_prepare_ms;
  r.host_finish_ms = t.host_finish_ms;
  r.stage_ms = t.stage_ms;
  r.weight_copy_ms = t.weight_copy_ms;
  r.weight_gather_ms = t.weight_gather_ms;
  r.t_video = step.t_video;
  r.t_audio = step.t_audio;
  r.video = checksum(v.video_velocity.data(), static_cast<int64_t>(v.video_velocity.size()));
  r.audio = checksum(v.audio_velocity.data(), static_cast<int64_t>(v.audio_velocity.size()));
  return r;
}

// Under --device-memory-limit: the plan for the bench's shape, streaming the blocks when it says
// so (an error when the limit is too small).
model::WeightStreamPlan apply_limit(const StepBenchOptions& o, Setup& st, const char* verb) {
  if (o.device_memory_limit == 0) return {};
  const model::WeightStreamPlan p = model::apply_weight_streaming(
      st.dev, st.layout, o.device_memory_limit, o.sage_attention, o.weight_stream_source);
  std::fprintf(
      stderr, "bench %s: --device-memory-limit %.2f GB: %s (planned %.2f GB on the device%s)\n",
      verb, o.device_memory_limit / 1e9,
      !p.stream                                ? "resident"
      : p.source == WeightStreamSource::pinned ? "block weights stream from pinned host memory"
                                               : "block weights stream from pageable host "
                                                 "memory through pinned staging (source file)",
      p.device_bytes / 1e9,
      p.stream ? detail::concat(", ", p.blocks.size(), " of ", st.dev.blocks.size(),
                                " blocks streamed, ", p.slots, " slots of ", p.slot_bytes / 1e9,
                                " GB, ", p.h2d_bytes_per_step / 1e9, " GB H2D per step")
                     .c_str()
               : "");
  return p;
}

// The warm-up, eager and graph steps on a new session over st.dev as it is now.
StepMeasurements measure_steps(const StepBenchOptions& o, Setup& st) {
  const SequenceLayout& L = st.layout;
  cuda::default_arena().reset_peak();
  // Steps 1..reps of an Euler trajectory: two distinct timesteps each, in the same order.
  const SamplerPlan plan = make_sampler_plan(L, o.reps + 2);
  auto inputs = [&](int r) {
    return ForwardInputs{L, plan.steps[1 + r].plan, st.noise.video_rows.data(),
                         st.noise.audio_rows.data(), st.text.data()};
  };

  StepMeasurements m;
  m.preset = o.preset;
  m.fp8 = o.fp8;
  m.int8_group = o.int8_group;
  if (o.nvfp4)
    m.nvfp4_algo =
        ops::linear_nvfp4_algo_name(ops::linear_nvfp4_resolve(ops::Nvfp4GemmAlgo::kAuto));
  m.seed = o.seed;
  m.weights_seed = o.weights_seed;
  m.model_setup_s = st.model_s;
  m.weight_bytes = cuda::default_arena().stats().current_allocated;
  m.block_launches =
      model::kBlockLaunches + (o.fp8 || o.int8_group >= 0 ? 4 : 0) + (o.sage_attention ? 1 : 0);
  m.sage_attention = o.sage_attention;

  auto t0 = Clock::now();
  model::ForwardSessionOptions so;
  so.cuda_graph = false;
  so.stage_timing = true;
  if (o.sage_attention) so.attention = ops::AttentionKernel::sage_8bit;
  model::ForwardSessionCuda session(st.dev, L, so);
  m.session_setup_ms = seconds_since(t0) * 1e3;

  // Warm-up 1 is the whole of `h3rt sample --steps 1` for this request (t = 0, then the Euler
  // step to the clean estimate): its latents' checksums compare with that command's.
  const SamplerPlan one_step = make_sampler_plan(L, 2);
  for (int w = 0; w < o.warmup; ++w) {
    if (w == 0) {
      const ForwardOutputs v =
          session.forward({L, one_step.steps[0].plan, st.noise.video_rows.data(),
                           st.noise.audio_rows.data(), st.text.data()});
      FloatVec video = st.noise.video_rows, audio = st.noise.audio_rows;
      sampler_step(one_step, 0, video.data(), v.video_velocity.data(),
                   static_cast<int64_t>(video.size()), audio.data(), v.audio_velocity.data(),
                   static_cast<int64_t>(audio.size()));
      const FloatVec lv =
          unpatchify_video(video.data(), st.c.in_channels, L.frames, L.height, L.width);
      const FloatVec la = audio_rows_to_latents(audio.data(), st.c.audio_channels, L.audio_len);
      m.one_step_video = checksum(lv.data(), static_cast<int64_t>(lv.size()));
      m.one_step_audio = checksum(la.data(), static_cast<int64_t>(la.size()));
    } else {
      session.forward(inputs(0));
    }
    const auto& t = session.last_times();
    if (w == 0) {
      m.first_step_ms = t.wall_ms;
      m.text_refiner_ms = t.text_refiner_ms;
    }
    std::fprintf(stderr, "bench step: warm-up %d: %.1f ms%s\n", w + 1, t.wall_ms,
                 t.text_refined ? " (text refiner included)" : "");
  }
  // Telemetry over the timed steps: samples in each call's wall time, energy around the runs.
  m.device = current_device_info();
  TelemetrySampler telemetry(make_nvml_telemetry(m.device.pci_bus_id));
  telemetry.start();
  std::vector<Interval> eager_windows, graph_windows;
  m.eager_telemetry.energy.begin_mj = telemetry.energy_mj();
  for (int r = 0; r < o.reps; ++r) {
    ForwardOutputs v;
#ifdef H3RT_HAVE_CUPTI
    if (r == 0)  // CUPTI activity records add well under 0.1% to a step
      m.cupti_kernels = count_kernel_launches([&] { v = session.forward(inputs(r)); });
    else
      v = session.forward(inputs(r));
#else
    v = session.forward(inputs(r));
#endif
    m.eager.push_back(repetition(session.last_times(), v, plan.steps[1 + r]));
    const double t_end = telemetry.now_ms();
    eager_windows.push_back({t_end - session.last_times().wall_ms, t_end});
    std::fprintf(stderr, "bench step: eager %d/%d: %.1f ms (device %.1f ms)\n", r + 1, o.reps,
                 m.eager.back().wall_ms, m.eager.back().device_ms);
  }
  m.eager_telemetry.energy.end_mj = telemetry.energy_mj();
  m.eager_telemetry.energy.units = o.reps;
  session.set_stage_timing(false);
  session.set_cuda_graph(true);
  m.graph_telemetry.energy.begin_mj = telemetry.energy_mj();
  for (int r = 0; r < o.reps; ++r) {
    ForwardOutputs v = session.forward(inputs(r));
    const auto& t = session.last_times();
    const double t_end = telemetry.now_ms();
    if (t.capture_ms > 0) {  // reported apart from the step; its energy too
      m.capture_ms = t.capture_ms;
      m.graph_telemetry.energy.begin_mj = telemetry.energy_mj();
    } else if (t.graph) {
      graph_windows.push_back({t_end - t.wall_ms, t_end});
      ++m.graph_telemetry.energy.units;
    }
    if (!t.graph) {
      std::fprintf(stderr, "bench step: no CUDA graph (capture failed); graph figures omitted\n");
      break;
    }
    m.graph.push_back(repetition(t, v, plan.steps[1 + r]));
    m.graph.back().wall_ms -= t.capture_ms;
    std::fprintf(stderr, "bench step: graph %d/%d: %.1f ms (device %.1f ms)\n", r + 1, o.reps,
                 m.graph.back().wall_ms, m.graph.back().device_ms);
  }
  m.graph_telemetry.energy.end_mj = telemetry.energy_mj();
  telemetry.stop();
#ifdef H3RT_HAVE_CUPTI
  if (!m.graph.empty()) {  // one more graph step, outside the figures above
    const KernelTimeline t =
        kernel_timeline(record_device_activity([&] { session.forward(inputs(0)); }));
    m.timeline = t;
    std::fprintf(stderr,
                 "bench step: one more graph step, %lld kernels: %.1f ms from the first kernel's "
                 "start to the last one's end, %.2f ms of it (%.2f%%) between kernels\n",
                 static_cast<long long>(t.kernels), t.span_us / 1e3, t.idle_us / 1e3,
                 100.0 * t.idle_fraction());
  }
#endif
  m.telemetry_header = telemetry.header_json();
  m.eager_telemetry.power = summarize(telemetry.samples(), eager_windows);
  m.graph_telemetry.power = summarize(telemetry.samples(), graph_windows);
  std::fprintf(
      stderr, "bench step: graph steps: %s\n",
      telemetry_line(m.telemetry_header, m.graph_telemetry.power, m.graph_telemetry.energy, "step")
          .c_str());
  m.graph_captured = session.graph_count() > 0;
  m.graph_nodes = session.graph_nodes();
  const auto mem = cuda::default_arena().stats();
  m.peak_allocated = mem.peak_allocated;
  m.peak_reserved = mem.peak_reserved;
  return m;
}

// --device-io: the Denoiser h3rt.preset(preset, device="cuda", ...) loads, with the same options.
std::unique_ptr<Denoiser> python_denoiser(const StepBenchOptions& o) {
  DenoiserOptions d;
  d.device = Device::cuda;
  d.attention = o.sage_attention ? Attention::sage : Attention::bf16;
  d.synthetic_gemm = o.fp8               ? SyntheticGemm::fp8
                     : o.nvfp4           ? SyntheticGemm::nvfp4
                     : o.int8_group >= 0 ? SyntheticGemm::int8
                                         : SyntheticGemm::bf16;
  d.int8_group = o.int8_group;
  d.device_memory_limit = o.device_memory_limit;
  ModelSource src;
  src.preset = o.preset;
  src.weights_seed = o.weights_seed;
  return Denoiser::create(src, d);
}

// tools/device/py_overhead.py's timed(): 3 untimed calls (eager, capture, replay), then `reps`
// calls back to back with CUDA events around each on the call's stream and one device sync at
// the end. The stream is the legacy default stream, torch's current stream unless a script
// sets another. `r`: the bench's request (layout, noise rows, stand-in text).
nlohmann::json measure_device_io(const StepBenchOptions& o, const Request& r) {
  std::fprintf(stderr, "bench step: --device-io: loading the model as h3rt.preset does\n");
  const std::unique_ptr<Denoiser> d = python_denoiser(o);
  constexpr uintptr_t kStream = 0;
  constexpr float kSigma = 0.7f;  // py_overhead.py's
  const auto s = reinterpret_cast<cudaStream_t>(kStream);
  const DeviceLatents in = upload_latents(d->config(), r, kStream);
  const DeviceLatents out = device_latents(d->config(), r.layout, kStream);
  auto call = [&] {
    forward_device_latents(*d, r, kSigma, in.video, in.audio, out.video, out.audio, kStream);
  };
  for (int w = 0; w < 3; ++w) call();
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(2 * o.reps);
  for (cudaEvent_t& e : ev) H3RT_CUDA_CHECK(cudaEventCreate(&e));
  std::vector<double> host_ms, gpu_ms;
  const auto t0 = Clock::now();
  for (int i = 0; i < o.reps; ++i) {
    H3RT_CUDA_CHECK(cudaEventRecord(ev[2 * i], s));
    const auto h0 = Clock::now();
    call();
    host_ms.push_back(seconds_since(h0) * 1e3);
    H3RT_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], s));
  }
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  const double wall_ms = seconds_since(t0) * 1e3 / o.reps;
  for (int i = 0; i < o.reps; ++i) {
    float ms = 0;
    H3RT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    gpu_ms.push_back(ms);
  }
  for (cudaEvent_t e : ev) H3RT_CUDA_CHECK(cudaEventDestroy(e));
  std::fprintf(stderr,
               "bench step: device-io forward (the Python module's CUDA-latents path in C++): "
               "%.4f ms per call (wall, %d calls), GPU p50 %.4f ms, host p50 %.4f ms\n",
               wall_ms, o.reps, median(gpu_ms), median(host_ms));
  return {{"entry",
           "forward_request with EvalOptions::device on ComfyUI-layout CUDA latents, patchify "
           "and unpatchify by strided_copy (Python's forward_latents with CUDA tensors, out=)"},
          {"stream", "legacy default"},
          {"sigma", kSigma},
          {"calls", o.reps},
          {"warmup_calls", 3},
          {"forward_ms_per_call_wall", wall_ms},
          {"forward_ms_p50_gpu", median(gpu_ms)},
          {"forward_ms_p50_host", median(host_ms)}};
}

}  // namespace

nlohmann::json run_step_bench(const StepBenchOptions& o) {
  H3RT_CHECK(o.reps >= 1 && o.warmup >= 1, "bench step: --reps and --warmup must be >= 1");
  H3RT_CHECK(!o.compare_resident || o.device_memory_limit > 0,
             "bench step: --compare-resident needs --device-memory-limit");
  StepMeasurements resident;
  if (o.compare_resident) {  // its own model, loaded whole, freed before the streamed one loads
    std::fprintf(stderr, "bench step: resident weights first (--compare-resident)\n");
    Setup r = setup(o, "step", true);
    resident = measure_steps(o, r);
    resident.weight_streaming = model::with_load({}, r.load);
  }
  Setup st = setup(o, "step");
  const model::WeightStreamPlan plan = apply_limit(o, st, "step");
  StepMeasurements m = measure_steps(o, st);
  m.weight_streaming =
      model::with_load(model::weight_streaming_of(plan, o.device_memory_limit), st.load);
  nlohmann::json j = o.compare_resident ? step_comparison_report(st.c, st.layout, m, resident)
                                        : step_report(st.c, st.layout, m);
  if (!o.device_io) return j;
  Request r;  // the same request; the bench's model goes before the Denoiser loads its own
  r.layout = st.layout;
  r.video_rows = std::move(st.noise.video_rows);
  r.audio_rows = std::move(st.noise.audio_rows);
  r.text = std::move(st.text);
  st.dev = {};
  j["device_io"] = measure_device_io(o, r);
  return j;
}

namespace {

// The sampling state in device memory (StepBenchOptions::device_loop), or null: on the host.
std::unique_ptr<DeviceLoop> sample_state(const StepBenchOptions& o, const FloatVec& video_rows,
                                         const FloatVec& audio_rows) {
  if (!o.device_loop) return nullptr;
  std::unique_ptr<DeviceLoop> dev = DeviceLoop::create(static_cast<int64_t>(video_rows.size()),
                                                       static_cast<int64_t>(audio_rows.size()));
  resume::LoopState st;
  st.video_rows = video_rows;
  st.audio_rows = audio_rows;
  dev->upload(st);
  return dev;
}

// The report's precision: the activations' and, where they differ, the block GEMMs' format.
std::string sample_precision(const StepBenchOptions& o) {
  if (o.fp8) return "bf16 + fp8 e4m3 block GEMMs";
  if (o.nvfp4) return "bf16 + NVFP4 W4A4 block GEMMs";
  if (o.int8_group >= 0)
    return "bf16 + int8 W8A8 block GEMMs (" + int8_rotation_description(o.int8_group) + ")";
  return "bf16";
}

}  // namespace

nlohmann::json run_sample_bench(const StepBenchOptions& o) {
  H3RT_CHECK(o.steps >= 1 && o.steps <= 1000, "bench sample: --steps must be in [1, 1000]");
  Setup st = setup(o, "sample");
  const model::WeightStreamPlan streaming = apply_limit(o, st, "sample");
  const SequenceLayout& L = st.layout;
  const H3Config& c = st.c;
  const auto t_start = Clock::now();
  const SamplerPlan plan = make_sampler_plan(L, o.steps + 1);
  model::ForwardSessionOptions so;
  so.cuda_graph = o.cuda_graph;
  if (o.sage_attention) so.attention = ops::AttentionKernel::sage_8bit;
  model::ForwardSessionCuda session(st.dev, L, so);
  const double session_ms = seconds_since(t_start) * 1e3;
  FloatVec& video_rows = st.noise.video_rows;
  FloatVec& audio_rows = st.noise.audio_rows;

  SampleReport rep;
  nlohmann::json per_step = nlohmann::json::array();
  const int evals = static_cast<int>(plan.steps.size());
  const DeviceInfo device = current_device_info();
  TelemetrySampler telemetry(make_nvml_telemetry(device.pci_bus_id));
  telemetry.start();
  StepTelemetry run_t;
  run_t.name = "run";
  run_t.energy.begin_mj = telemetry.energy_mj();
  run_t.energy.units = evals;
  const double t_loop = telemetry.now_ms();
  const std::unique_ptr<DeviceLoop> dev = sample_state(o, video_rows, audio_rows);
  for (int i = 0; i < evals; ++i) {
    ForwardInputs in{L, plan.steps[i].plan, dev ? nullptr : video_rows.data(),
                     dev ? nullptr : audio_rows.data(), st.text.data()};
    if (i + 1 < evals) in.next_timesteps = &plan.steps[i + 1].plan.timestep;  // look-ahead
    if (dev) in.device = dev->io(false);
    ForwardOutputs v = session.forward(in);
    const model::ForwardStepTimes& t = session.last_times();
    StageSeconds s;  // packing: the session's host work before the device work
    s.packing = t.host_prepare_ms / 1e3;
    s.denoiser = (t.wall_ms - t.host_prepare_ms) / 1e3;
    auto t0 = Clock::now();
    if (dev) {  // queued; the wait for the step counts as the denoiser's
      dev->euler_step(plan, i);
      s.sampler_update = seconds_since(t0);
      t0 = Clock::now();
      dev->wait();
      s.denoiser += seconds_since(t0);
    } else {
      sampler_step(plan, i, video_rows.data(), v.video_velocity.data(),
                   static_cast<int64_t>(video_rows.size()), audio_rows.data(),
                   v.audio_velocity.data(), static_cast<int64_t>(audio_rows.size()));
      s.sampler_update = seconds_since(t0);
    }
    rep.stages.push_back(s);
    per_step.push_back({{"device_ms", t.device_ms},
                        {"cuda_graph", t.graph},
                        {"capture_ms", t.capture_ms},
                        {"text_refiner_ms", t.text_refiner_ms},
                        {"time_embedding_ahead", t.temb_ahead},
                        {"look_ahead_ms", t.ahead_ms}});
    std::fprintf(stderr, "bench sample: step %d/%d: %.1f ms%s\n", i + 1, evals, t.wall_ms,
                 t.graph ? " (graph)" : "");
  }
  run_t.energy.end_mj = telemetry.energy_mj();
  telemetry.stop();
  run_t.power = summarize(telemetry.samples(), {{t_loop, telemetry.now_ms()}});
  std::fprintf(stderr, "bench sample: %s\n",
               telemetry_line(telemetry.header_json(), run_t.power, run_t.energy, "step").c_str());
  auto t0 = Clock::now();
  if (dev) {
    resume::LoopState end;
    dev->download(end);
    video_rows = std::move(end.video_rows);
    audio_rows = std::move(end.audio_rows);
  }
  FloatVec video = unpatchify_video(video_rows.data(), c.in_channels, L.frames, L.height, L.width);
  FloatVec audio = audio_rows_to_latents(audio_rows.data(), c.audio_channels, L.audio_len);
  rep.stages.back().output_transform = seconds_since(t0);
  rep.total_seconds = seconds_since(t_start);

  rep.device = device.name;
  rep.model = o.preset + " (synthetic, weights seed " + std::to_string(o.weights_seed) + ")";
  rep.precision = sample_precision(o);
  rep.set_layout(L);
  rep.frames = o.pixel_frames;
  rep.width = o.pixel_width;
  rep.height = o.pixel_height;
  rep.seed = o.seed;
  rep.steps = evals;
  const auto mem = cuda::default_arena().stats();
  rep.peak_device_allocated_bytes = mem.peak_allocated;
  rep.peak_device_reserved_bytes = mem.peak_reserved;
  rep.peak_host_bytes = host_memory_stats().peak_bytes;
  rep.video = checksum(video.data(), static_cast<int64_t>(video.size()));
  rep.audio = checksum(audio.data(), static_cast<int64_t>(audio.size()));
  std::fprintf(stderr, "bench sample: %d steps in %.2f s; checksums video %.6g, audio %.6g\n",
               evals, rep.total_seconds, rep.video.sum, rep.audio.sum);

  nlohmann::json j = to_json(rep);
  add_device_fields(j, device);
  j["cuda_graph"] = o.cuda_graph && session.graph_enabled();
  j["sampler_state"] = dev ? "device" : "host";
  j["setup"] = {{"model_seconds", st.model_s}, {"session_ms", session_ms}};
  j["per_step"] = per_step;
  j["weight_streaming"] = to_json(
      model::with_load(model::weight_streaming_of(streaming, o.device_memory_limit), st.load));
  std::vector<double> ms;
  for (const auto& s : rep.stages) ms.push_back(s.step_total() * 1e3);
  run_t.step_ms = median(ms);
  j["step_ms_p50"] = run_t.step_ms;
  j["telemetry"] = steps_telemetry_json(telemetry.header_json(), {run_t});
  return j;
}

}  // namespace h3rt::bench
