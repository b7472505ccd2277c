// `h3rt bench step` and `h3rt bench sample`: see src/bench/step_bench.h.
#include <memory>
#include <string>

#include "bench/plot.h"
#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/output_path.h"
#include "cli/validators.h"
#include "h3rt/check.h"
#include "h3rt/pipeline.h"
#include "h3rt/report.h"
#ifdef H3RT_HAVE_CUDA
#include "bench/step_bench.h"
#endif

namespace h3rt::cli {
namespace {

struct Opts {
  std::string preset = "h3", gemm = "bf16", cuda_graph = "on", out = "-", attention = "bf16", plot;
  std::string sampler_state = "device";
  int reps = 3, warmup = 1, steps = 8, group = 256;
  int64_t width = 0, height = 0, frames = 0;
  uint64_t seed = 440420, weights_seed = 0;
  std::string device_memory_limit = "0";
  std::string weight_stream_source = "auto";
  bool compare_resident = false, device_io = false;
};

void add_common(CLI::App* cmd, Opts& o) {
  cmd->add_option("--preset", o.preset,
                  "h3 (release dims, 1344x768, 124 frames, 100 text tokens: 37,810 rows) or "
                  "tiny (192x128, 22 frames, 10 text tokens); `h3rt sample`'s default shapes")
      ->check(CLI::IsMember({"h3", "tiny"}))
      ->capture_default_str();
  cmd->add_option("--gemm", o.gemm,
                  "Block GEMMs: bf16; fp8 (e4m3, static per-tensor scales, as ComfyUI "
                  "fp8_scaled with input_scale); or nvfp4 (W4A4, weights packed on the GPU as "
                  "quantize-checkpoint does, static input scales: the producers encode); or int8 "
                  "(W8A8 as ComfyUI's int8_convrot, weights quantized on the GPU)")
      ->check(CLI::IsMember({"bf16", "fp8", "nvfp4", "int8"}))
      ->capture_default_str();
  cmd->add_option("--group-size", o.group, "--gemm int8: the convrot group size (0: no rotation)")
      ->check(CLI::IsMember({0, 16, 64, 256}))
      ->capture_default_str();
  cmd->add_option("--width", o.width, "video width in pixels (default: the preset's)")
      ->check(positive_number());
  cmd->add_option("--height", o.height, "video height in pixels (default: the preset's)")
      ->check(positive_number());
  cmd->add_option("--frames", o.frames,
                  "video frames (default: the preset's; ComfyUI's default is 864x480x124)")
      ->check(positive_number());
  cmd->add_option("--attention", o.attention,
                  "Block attention: bf16 (flash) or sage (8-bit SageAttention2 numerics)")
      ->check(CLI::IsMember({"bf16", "sage"}))
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Noise and stand-in text seed (as `h3rt sample --seed`)")
      ->check(seed_number())
      ->capture_default_str();
  cmd->add_option("--weights-seed", o.weights_seed, "Synthetic weights seed")
      ->check(seed_number())
      ->capture_default_str();
  add_device_memory_limit(cmd, o.device_memory_limit);
  add_weight_stream_source(cmd, o.weight_stream_source);
  cmd->add_option("--out", o.out, "JSON report path, - for stdout")->capture_default_str();
  cmd->add_option("--plot", o.plot,
                  "Also draw the timeline as SVG (step: the eager step's stages along time and "
                  "the CUDA graph step; sample: every step's stages along the run)");
}

#ifdef H3RT_HAVE_CUDA
// Writes the report, and its picture with --plot.
void write_outputs(const Opts& o, const nlohmann::json& report) {
  write_json(o.out, report);
  if (!o.plot.empty()) bench::write_svg(o.plot, bench::plot_report_svg(report));
}

void check_outputs(const Opts& o) {
  check_output_path(o.out, "--out");
  if (!o.plot.empty()) check_output_path(o.plot, "--plot");
}
#endif

#ifdef H3RT_HAVE_CUDA
bench::StepBenchOptions to_bench(const Opts& o) {
  const bool h3 = o.preset == "h3";
  bench::StepBenchOptions b;
  b.preset = o.preset;
  b.pixel_frames = h3 ? 124 : 22;
  b.pixel_width = h3 ? 1344 : 192;
  b.pixel_height = h3 ? 768 : 128;
  b.text_len = h3 ? 100 : 10;
  b.audio_len = audio_latents_for(b.pixel_frames / 24.0);
  b.frames = latent_frames_for(b.pixel_frames);
  b.height = b.pixel_height / 16;
  b.width = b.pixel_width / 16;
  const LatentShape sh =
      latent_shape_for(o.width, o.height, o.frames, {b.frames, b.height, b.width, b.audio_len});
  b.frames = sh.frames, b.height = sh.height, b.width = sh.width, b.audio_len = sh.audio;
  if (o.width) b.pixel_width = o.width;
  if (o.height) b.pixel_height = o.height;
  if (o.frames) b.pixel_frames = o.frames;
  if (o.gemm == "int8") b.int8_group = o.group;
  b.reps = o.reps;
  b.warmup = o.warmup;
  b.steps = o.steps;
  b.cuda_graph = o.cuda_graph == "on";
  b.device_loop = o.sampler_state == "device";
  b.fp8 = o.gemm == "fp8";
  b.nvfp4 = o.gemm == "nvfp4";
  b.sage_attention = o.attention == "sage";
  b.seed = o.seed;
  b.weights_seed = o.weights_seed;
  // auto: the GPU's free memory now, before the model loads (as create() resolves it).
  b.device_memory_limit = resolve_device_memory_limit(
      parse_memory_size(o.device_memory_limit, "--device-memory-limit"));
  b.weight_stream_source =
      parse_weight_stream_source(o.weight_stream_source, "--weight-stream-source");
  b.compare_resident = o.compare_resident;
  b.device_io = o.device_io;
  return b;
}
#endif

#ifndef H3RT_HAVE_CUDA
[[noreturn]] void no_cuda() {
  H3RT_FAIL("this h3rt was built without CUDA (cmake -DH3RT_CUDA=ON needs nvcc)");
}
#endif

}  // namespace

void add_bench_step_command(CLI::App& bench) {
  auto o = std::make_shared<Opts>();
  auto* step = bench.add_subcommand(
      "step",
      "Time one whole denoising step's model evaluation on the GPU (synthetic weights) "
      "through a reusable forward session, eager and as a CUDA graph; JSON report, with SM "
      "clock, power and joules per step from NVML where available");
  add_common(step, *o);
  step->add_option("--reps", o->reps, "Timed steps of each kind (medians)")
      ->check(positive_number())
      ->capture_default_str();
  step->add_option("--warmup", o->warmup, "Untimed steps first (the first runs the text refiner)")
      ->check(positive_number())
      ->capture_default_str();
  step->add_flag("--compare-resident", o->compare_resident,
                 "With --device-memory-limit: run the same steps with resident weights first "
                 "(a model loaded whole, freed after), then under the limit; the report adds "
                 "the resident run under \"resident\" (its load peak too) and the step time "
                 "ratios and bit identity under \"streamed_vs_resident\"");
  step->add_flag("--device-io", o->device_io,
                 "Then (the bench's model freed) load the model as h3rt.preset(..., "
                 "device=\"cuda\") does and time the Python module's device forward of CUDA "
                 "latents, in C++: per call the strided_copy patchify into new device rows, "
                 "forward_request into new device velocity rows on the legacy default stream, "
                 "the unpatchify into output latents allocated once; sigma 0.7, the text "
                 "unchanged, 3 untimed calls, then --reps calls back to back, timed as "
                 "tools/device/py_overhead.py times the Python call. The report adds "
                 "\"device_io\": forward_ms_per_call_wall (one device sync after the calls, "
                 "divided by them), forward_ms_p50_gpu (CUDA events around each call) and "
                 "forward_ms_p50_host (the call's return time)");
  step->callback([o] {
#ifdef H3RT_HAVE_CUDA
    check_outputs(*o);
    write_outputs(*o, bench::run_step_bench(to_bench(*o)));
#else
    no_cuda();
#endif
  });

  auto s = std::make_shared<Opts>();
  auto* sample = bench.add_subcommand(
      "sample",
      "Time the whole Euler sampling loop on the GPU (synthetic weights, the request `h3rt "
      "sample` builds for the same seed): per-step stages, the final latents' checksums, and "
      "SM clock, power and joules per step from NVML where available");
  add_common(sample, *s);
  sample->add_option("--steps", s->steps, "Model evaluations")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  sample
      ->add_option("--cuda-graph", s->cuda_graph,
                   "Replay the steps from CUDA graphs (each captured after one eager step with the "
                   "same number of distinct timesteps)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  sample
      ->add_option("--sampler-state", s->sampler_state,
                   "Where the latents live between steps: device (the forward reads and writes "
                   "device rows, the Euler update runs on the GPU, nothing crosses to the host "
                   "until the end; sample()'s default for a CUDA model) or host (the velocities "
                   "come back each step and the update runs on the CPU)")
      ->check(CLI::IsMember({"device", "host"}))
      ->capture_default_str();
  sample->callback([s] {
#ifdef H3RT_HAVE_CUDA
    check_outputs(*s);
    write_outputs(*s, bench::run_sample_bench(to_bench(*s)));
#else
    no_cuda();
#endif
  });
}

}  // namespace h3rt::cli
