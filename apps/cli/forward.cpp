// `h3rt forward`: one transformer forward at a given video sigma (audio sigma derived as the
// reference does, h3rt::forward_at_sigma), writing the data-ward velocities.
#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/output_path.h"
#include "cli/validators.h"
#include "h3rt/safetensors.h"

namespace h3rt::cli {
namespace {

struct ForwardOptions {
  ModelOptions model;
  std::string inputs, out;
  double sigma = -1;
  int steps = 0;  // > 0: the sampler's schedule of that many steps (PDD head banks)
  double shift = kVideoShift, audio_shift = kAudioShift;
};

float sigma_from(const ForwardOptions& o) {
  if (o.sigma >= 0) return static_cast<float>(o.sigma);
  SafetensorsFile f = SafetensorsFile::open(o.inputs);
  H3RT_CHECK(f.contains("fwd/sigma_video"), o.inputs,
             ": no tensor 'fwd/sigma_video' and no --sigma given");
  Tensor s = f.get("fwd/sigma_video");
  H3RT_CHECK(s.numel() == 1, o.inputs, ": tensor 'fwd/sigma_video' has shape ",
             shape_str(s.shape()), ", expected one value");
  return s.to_f32()[0];
}

void run_forward(const ForwardOptions& o) {
  check_output_path(o.out, "--out");
  const float sigma_v = sigma_from(o);
  H3RT_CHECK(std::isfinite(sigma_v) && sigma_v >= 0.0f && sigma_v <= 1.0f,
             "--sigma must lie in [0, 1], got ", sigma_v);
  std::unique_ptr<Denoiser> denoiser = o.model.create();
  const H3Config& c = denoiser->config();
  const Request req = request_from_inputs(o.inputs, c);
  EvalOptions eval;
  if (o.steps > 0) eval.sample_sigmas = sigma_grid(o.steps + 1, static_cast<float>(o.shift));
  eval.shifts = {o.shift, o.audio_shift};
  const ForwardOutputs v = forward_request(*denoiser, req, sigma_v, eval);
  const float sigma_a = audio_sigma_from_video(sigma_v, o.shift, o.audio_shift);
  const int64_t nv = req.layout.video_rows(), na = req.layout.audio_rows();
  write_safetensors(
      o.out,
      {{"video_velocity", tensor_from_f32({v.video_velocity.begin(), v.video_velocity.end()},
                                          {1, nv, c.video_features()})},
       {"audio_velocity", tensor_from_f32({v.audio_velocity.begin(), v.audio_velocity.end()},
                                          {1, na, c.audio_channels})}},
      {{"producer", "h3rt forward"},
       {"sigma_video", std::to_string(sigma_v)},
       {"sigma_audio", std::to_string(sigma_a)},
       {"shift_video", std::to_string(o.shift)},
       {"shift_audio", std::to_string(o.audio_shift)},
       {"precision", o.model.precision_name()},
       {"fp8_activations", o.model.fp8_activations},
       {"device", denoiser->device_name()}});
  std::fprintf(stderr, "h3rt forward: sigma video %.7g audio %.7g, %lld rows -> %s\n", sigma_v,
               sigma_a, (long long)req.layout.seq_len(), o.out.c_str());
}

}  // namespace

void add_forward_command(CLI::App& app) {
  auto o = std::make_shared<ForwardOptions>();
  auto* cmd = app.add_subcommand("forward",
                                 "One transformer forward; writes video_velocity [1,Nv,96] and "
                                 "audio_velocity [1,2N,32] (f32, data-ward: x0 = x + sigma v)");
  o->model.add_to(cmd, false);
  cmd->add_option("--inputs", o->inputs,
                  "Inputs: input/text_embeds [1,L,text_dim], input/video_latents [1,24,T,H,W], "
                  "input/audio_latents [2,32,N]; optional conditioning (keyframe/<i>/..., "
                  "ref/<i>/..., input/text_token_tags, input/video_denoise_mask [T,H,W], "
                  "input/audio_denoise_mask [2,N]; README \"Inputs files\"), run with ComfyUI's "
                  "layout and timesteps; velocities of masked rows are multiplied by the mask")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--sigma", o->sigma,
                  "Video sigma in [0, 1] (default: fwd/sigma_video of the inputs file); the "
                  "audio sigma is derived from it")
      ->check(number_in(0, 1));
  cmd->add_option("--steps", o->steps,
                  "The sampler's step count: its sigma grid (at --shift) is the schedule a "
                  "checkpoint with a PDD head bank picks its heads from (required for those)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--shift", o->shift,
                  "Video sigma shift (ComfyUI's MiniMaxH3SigmaShift shift_video): with "
                  "--audio-shift it maps the video sigma to the audio timestep")
      ->capture_default_str()
      ->check(positive_number());
  cmd->add_option("--audio-shift", o->audio_shift,
                  "Audio sigma shift (MiniMaxH3SigmaShift shift_audio)")
      ->capture_default_str()
      ->check(positive_number());
  cmd->add_option("--out", o->out, "Output .safetensors file")->required();
  cmd->callback([o] { run_forward(*o); });
}

}  // namespace h3rt::cli
