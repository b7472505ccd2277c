// `h3rt sample`: the whole denoising loop (rectified-flow Euler, video shift 12, audio shift 3)
// on the CPU reference or the CUDA backend, with a progress line, final latents and a JSON
// report.
#include <chrono>
#include <cstdio>
#include <memory>
#include <tuple>

#include "cli/backend.h"
#include "cli/commands.h"
#include "cli/output_path.h"
#include "cli/progress.h"
#include "cli/request.h"
#include "h3rt/formats.h"
#include "h3rt/report.h"
#include "h3rt/safetensors.h"
#include "h3rt/sampler.h"

namespace h3rt::cli {
namespace {

struct SampleOptions {
  ModelOptions model;
  std::string inputs, text_embeddings;
  int64_t frames = 0, width = 0, height = 0, text_tokens = 0;
  double audio_seconds = 0;
  int steps = 8;
  uint64_t seed = 440420;
  std::string out = "latents.safetensors", report;
  std::string cuda_graph = "on";
  std::string attention = "bf16";
  std::string fp8_activations = "static";
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Shapes and text from options; the starting noise from the seeded generator.
Request request_from_options(const SampleOptions& o, const H3Config& config, bool h3_dims) {
  const int64_t frames = o.frames ? o.frames : (h3_dims ? 124 : 22);
  const int64_t width = o.width ? o.width : (h3_dims ? 1344 : 192);
  const int64_t height = o.height ? o.height : (h3_dims ? 768 : 128);
  H3RT_CHECK(width % 32 == 0 && height % 32 == 0, "--width and --height must be multiples of 32 ",
             "(16x VAE compression and 2x2 patches), got ", width, "x", height);
  const double audio_seconds = o.audio_seconds > 0 ? o.audio_seconds : frames / 24.0;
  int64_t text_len = o.text_tokens ? o.text_tokens : (h3_dims ? 100 : 10);
  Request r;
  if (!o.text_embeddings.empty()) {
    r.text = text_embeddings_from_file(o.text_embeddings, config, &text_len);
  } else {
    // Stand-in text embeddings (seeded, stream 2) until a text encoder is wired in.
    r.text.resize(static_cast<size_t>(text_len * config.text_dim));
    gaussian_noise(o.seed, 2, 0, r.text.data(), static_cast<int64_t>(r.text.size()));
    for (float& x : r.text) x = round_bf16(x);
  }
  r.layout = make_t2va_layout(text_len, audio_latents_for(audio_seconds), latent_frames_for(frames),
                              height / 16, width / 16);
  InitialNoise noise = initial_noise(o.seed, r.layout, config.in_channels, config.audio_channels);
  r.video_rows = std::move(noise.video_rows);
  r.audio_rows = std::move(noise.audio_rows);
  return r;
}

void run_sample(const SampleOptions& o) {
  H3RT_CHECK(o.inputs.empty() || (o.frames == 0 && o.width == 0 && o.height == 0 &&
                                  o.audio_seconds == 0 && o.text_embeddings.empty()),
             "--inputs gives the shapes, noise and text; do not combine it with --frames, "
             "--width, --height, --audio-seconds or --text-embeddings");
  const int steps = o.steps;
  H3RT_CHECK(steps >= 1 && steps <= 1000, "--steps must be in [1, 1000], got ", steps);
  check_output_path(o.out, "--out");
  if (!o.report.empty()) check_output_path(o.report, "--report");
  reset_host_peak();
  auto t_start = Clock::now();
  BackendOptions bo;
  bo.cuda_graph = o.cuda_graph == "on";
  bo.sage_attention = o.attention == "sage";
  bo.fp8_activations = parse_fp8_activations(o.fp8_activations);
  std::unique_ptr<Backend> backend = Backend::create(o.model, o.model.device, bo);
  const H3Config& c = backend->config();
  Request req = o.inputs.empty() ? request_from_options(o, c, o.model.preset == "h3")
                                 : request_from_inputs(o.inputs, c);
  const SequenceLayout& L = req.layout;
  SamplerPlan plan = make_sampler_plan(L, steps + 1);
  const int evals = static_cast<int>(plan.steps.size());
  std::fprintf(stderr,
               "h3rt sample: %s, %s, %lld rows (text %lld, audio %lld, video %lld), "
               "%d steps, seed %llu, %s\n",
               o.model.describe().c_str(), o.model.precision_name().c_str(), (long long)L.seq_len(),
               (long long)L.text_len, (long long)L.audio_rows(), (long long)L.video_rows(), evals,
               (unsigned long long)o.seed, backend->device_name().c_str());

  SampleReport rep;
  Progress progress("denoising", evals);
  progress.update(0);
  for (int i = 0; i < evals; ++i) {
    StageSeconds st;
    auto t0 = Clock::now();
    const SigmaSchedule schedule = sigma_schedule(plan, i);  // for PDD head banks
    ForwardInputs in{
        L,        plan.steps[i].plan, req.video_rows.data(), req.audio_rows.data(), req.text.data(),
        &schedule};
    st.packing = seconds_since(t0);
    t0 = Clock::now();
    ForwardOutputs v = backend->forward(in);
    st.denoiser = seconds_since(t0);
    t0 = Clock::now();
    sampler_step(plan, i, req.video_rows.data(), v.video_velocity.data(),
                 static_cast<int64_t>(req.video_rows.size()), req.audio_rows.data(),
                 v.audio_velocity.data(), static_cast<int64_t>(req.audio_rows.size()));
    st.sampler_update = seconds_since(t0);
    rep.stages.push_back(st);
    progress.update(i + 1);
  }
  auto t0 = Clock::now();
  FloatVec video =
      unpatchify_video(req.video_rows.data(), c.in_channels, L.frames, L.height, L.width);
  FloatVec audio = audio_rows_to_latents(req.audio_rows.data(), c.audio_channels, L.audio_len);
  if (!rep.stages.empty()) rep.stages.back().output_transform = seconds_since(t0);
  std::vector<float> vv(video.begin(), video.end()), av(audio.begin(), audio.end());
  write_safetensors(
      o.out,
      {{"video_latents", tensor_from_f32(vv, {1, c.in_channels, L.frames, L.height, L.width})},
       {"audio_latents", tensor_from_f32(av, {2, c.audio_channels, L.audio_len})}},
      {{"producer", "h3rt sample"}, {"seed", std::to_string(o.seed)}});

  rep.device = backend->device_name();
  rep.model = o.model.describe();
  if (bo.fp8_activations == Fp8Activations::dynamic) rep.model += ", fp8 activations dynamic";
  rep.precision = o.model.precision_name();
  rep.set_layout(L);
  rep.frames = video_frames_for(L.frames);
  rep.width = L.width * 16;
  rep.height = L.height * 16;
  rep.seed = o.seed;
  rep.steps = evals;
  rep.total_seconds = seconds_since(t_start);
  rep.peak_host_bytes = host_memory_stats().peak_bytes;
  std::tie(rep.peak_device_allocated_bytes, rep.peak_device_reserved_bytes) =
      backend->device_peak_bytes();
  rep.video = checksum(video.data(), static_cast<int64_t>(video.size()));
  rep.audio = checksum(audio.data(), static_cast<int64_t>(audio.size()));
  std::fprintf(stderr,
               "h3rt sample: wrote %s in %.2f s; checksums video %.6g (|x| %.6g), "
               "audio %.6g (|x| %.6g)\n",
               o.out.c_str(), rep.total_seconds, rep.video.sum, rep.video.abs_sum, rep.audio.sum,
               rep.audio.abs_sum);
  if (!o.report.empty()) write_json(o.report, to_json(rep));
}

}  // namespace

void add_sample_command(CLI::App& app) {
  auto o = std::make_shared<SampleOptions>();
  auto* cmd = app.add_subcommand(
      "sample",
      "Run the whole denoising loop and write the final latents (with no arguments: "
      "the tiny preset, a few seconds on the CPU)");
  o->model.add_to(cmd, true);
  cmd->add_option("--inputs", o->inputs,
                  "Inputs file (input/text_embeds, input/video_latents as the starting noise, "
                  "input/audio_latents); it fixes shapes, noise and text")
      ->check(CLI::ExistingFile);
  cmd->add_option("--text-embeddings", o->text_embeddings,
                  "Text encoder output [1, L, text_dim] (tensor text_embeds); default: seeded "
                  "stand-in embeddings")
      ->check(CLI::ExistingFile);
  cmd->add_option("--text-tokens", o->text_tokens,
                  "Length of the stand-in text embeddings (default 10 tiny, 100 h3)");
  cmd->add_option("--frames", o->frames,
                  "Video frames: 1, 5, 9, 13, 17, 18, 22, ... "
                  "(default 22 tiny, 124 h3)");
  cmd->add_option("--width", o->width,
                  "Width in pixels, a multiple of 32 (default 192 tiny, "
                  "1344 h3)");
  cmd->add_option("--height", o->height,
                  "Height in pixels, a multiple of 32 (default 128 tiny, "
                  "768 h3)");
  cmd->add_option("--audio-seconds", o->audio_seconds,
                  "Audio length in seconds, 40 latents/s (default: the video's length at 24 fps)");
  cmd->add_option("--steps", o->steps, "Model evaluations (default 8)");
  cmd->add_option("--cuda-graph", o->cuda_graph,
                  "With --device cuda: replay the steps from CUDA graphs (same bits as eager "
                  "launches; the first step of each kind runs eagerly)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--attention", o->attention,
                  "Attention in the blocks: bf16 (the reference numerics) or sage (8-bit "
                  "SageAttention2 numerics, --device cuda only; not bit-comparable)")
      ->check(CLI::IsMember({"bf16", "sage"}))
      ->capture_default_str();
  add_fp8_activations_option(cmd, &o->fp8_activations);
  cmd->add_option("--seed", o->seed, "Noise seed (Philox4x32-10, same bits on CPU and GPU)")
      ->capture_default_str();
  cmd->add_option("--out", o->out,
                  "Output: video_latents [1,24,T,H,W] and audio_latents "
                  "[2,32,N], f32")
      ->capture_default_str();
  cmd->add_option("--report", o->report,
                  "Write a JSON report (stage times, peak memory, "
                  "checksums); - for stdout");
  cmd->callback([o] { run_sample(*o); });
}

}  // namespace h3rt::cli
