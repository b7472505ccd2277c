// Conditioned requests and their single evaluation: ComfyUI's layout, timesteps, condition rows,
// output masks and audio carry around one Denoiser::forward.
#include <cmath>

#include "h3rt/device.h"
#include "h3rt/pipeline.h"

namespace h3rt {
namespace {

// The velocities times the request's masks (MiniMaxH3Model.forward, before the carry).
void apply_masks(const Request& r, const H3Config& c, ForwardOutputs& v) {
  const Conditioning& k = r.conditioning;
  const SequenceLayout& l = r.layout;
  if (!k.video_mask.empty())
    apply_video_mask(v.video_velocity.data(), k.video_mask.data(), c.in_channels, l.frames,
                     l.height, l.width);
  if (!k.audio_mask.empty())
    apply_audio_mask(v.audio_velocity.data(), k.audio_mask.data(), c.audio_channels, l.audio_len);
}

// The host-side steps a device evaluation does not run yet: refused, not skipped.
void check_device_request(const Request& r, const EvalOptions& o) {
  H3RT_CHECK(o.audio_scale == 1.0f, "audio_scale ", o.audio_scale,
             " with device rows: the audio carry runs on host rows "
             "only (pass host arrays, or apply the carry around the forward)");
  H3RT_CHECK(
      !o.mask_outputs || (r.conditioning.video_mask.empty() && r.conditioning.audio_mask.empty()),
      "denoise masks with mask_outputs on device rows: the output mask multiply runs on "
      "host rows only (pass mask_outputs=false and multiply, or host arrays)");
}

}  // namespace

void check_flow_shifts(const FlowShifts& s) {
  H3RT_CHECK(std::isfinite(s.video) && s.video > 0, "video_shift must be a finite number > 0, got ",
             s.video);
  H3RT_CHECK(std::isfinite(s.audio) && s.audio > 0, "audio_shift must be a finite number > 0, got ",
             s.audio);
}

void condition_request(Request& r, const H3Config& config, Conditioning c) {
  const SequenceLayout& old = r.layout;
  const LayoutSpec spec =
      layout_spec(c, old.text_len, old.audio_len, old.frames, old.height, old.width);
  r.cond = condition_rows(c, config.in_channels, config.audio_channels);
  r.layout = make_layout(spec);
  r.conditioning = std::move(c);
  r.comfy = true;
}

ForwardOutputs forward_request(Denoiser& d, const Request& r, float sigma, const EvalOptions& o) {
  H3RT_CHECK(std::isfinite(sigma) && sigma >= 0.0f && sigma <= 1.0f,
             "sigma must lie in [0, 1], got ", sigma);
  const bool carried = o.audio_scale != 1.0f;
  check_flow_shifts(o.shifts);
  if (o.device) check_device_request(r, o);
  if (!r.comfy && !carried && !o.device)
    return forward_at_sigma(d, r.layout, r.video_rows.data(), r.audio_rows.data(), r.text.data(),
                            sigma, o.sample_sigmas, o.shifts);
  const H3Config& c = d.config();
  const double sv = o.shifts.video, sa = o.shifts.audio;
  // ComfyUI's forward carries the audio in float32 tensor ops: the shifts as float32 there.
  const AudioCarry carry =
      audio_carry(sigma, o.audio_scale, static_cast<float>(sv), static_cast<float>(sa));
  FloatVec audio_net = r.audio_rows;
  if (carried) carry_audio_input(audio_net.data(), static_cast<int64_t>(audio_net.size()), carry);

  const TimestepPlan plan =
      r.comfy ? make_conditioned_plan(r.layout, comfy_eval_times(sigma, sv, sa), r.conditioning.aug,
                                      row_masks(r.conditioning, r.layout))
              : make_timestep_plan(r.layout, 1.0f - sigma,
                                   1.0f - audio_sigma_from_video(sigma, sv, sa));
  const SigmaSchedule schedule{sigma, o.sample_sigmas, sv, sa};
  ForwardInputs in{r.layout,
                   plan,
                   o.device ? nullptr : r.video_rows.data(),
                   o.device ? nullptr : audio_net.data(),
                   r.text.data(),
                   o.sample_sigmas.empty() ? nullptr : &schedule,
                   r.cond.video.empty() ? nullptr : r.cond.video.data(),
                   r.cond.audio.empty() ? nullptr : r.cond.audio.data()};
  in.device = o.device;
  ForwardOutputs v = d.forward(in);
  if (o.device) return v;  // velocities in the caller's device buffers (unmasked, uncarried)
  if (o.mask_outputs) apply_masks(r, c, v);
  if (carried)
    carry_audio_output(v.audio_velocity.data(), audio_net.data(),
                       static_cast<int64_t>(v.audio_velocity.size()), carry);
  return v;
}

void forward_device_latents(Denoiser& d, const Request& r, float sigma, const Tensor& video,
                            const Tensor& audio, const Tensor& out_video, const Tensor& out_audio,
                            uintptr_t stream, EvalOptions o) {
  H3RT_CHECK(video.dim() == 5 && audio.dim() == 4,
             "forward_device_latents: video must be [1, C, T, H, W] and audio [1, Ca, 2, N]");
  const int64_t C = video.size(1), T = video.size(2), H = video.size(3), W = video.size(4);
  const int64_t Ca = audio.size(1), N = audio.size(3), Nv = T * (H / 2) * (W / 2);
  const Shape six{T, H / 2, W / 2, C, 2, 2}, audio3{2, N, Ca};
  const Tensor v = device_f32({Nv, 4 * C}, stream), a = device_f32({2 * N, Ca}, stream);
  copy_strided(v.reshape(six), video_rows_view(video), stream);
  copy_strided(a.reshape(audio3), comfy_audio_rows_view(audio), stream);
  const Tensor vv = device_f32({Nv, 4 * C}, stream), av = device_f32({2 * N, Ca}, stream);
  const DeviceIO io{v.ptr<float>(), a.ptr<float>(), vv.ptr<float>(), av.ptr<float>(), stream};
  o.device = &io;
  forward_request(d, r, sigma, o);
  copy_strided(video_rows_view(out_video), vv.reshape(six), stream);
  copy_strided(comfy_audio_rows_view(out_audio), av.reshape(audio3), stream);
}

}  // namespace h3rt
