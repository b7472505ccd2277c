// ComfyUI's sampler-side denoise masks (comfy/samplers.py KSamplerX0Inpaint, KSAMPLER.sample's
// noise_scaling with the latent image, MiniMaxH3.process_latent_in's audio scale) on the loop's
// host rows. The model side (per-row timesteps, masked outputs) is conditioning.h's.
#include "pipeline/inpaint.h"

namespace h3rt {
namespace {

int64_t size_of(const FloatVec& v) {
  return static_cast<int64_t>(v.size());
}

// A stream's clean latent in rows: the given one (checked against the target) or zeros.
FloatVec clean_rows(const FloatVec& given, int64_t n, const char* what, const Shape& want,
                    const std::function<FloatVec()>& to_rows) {
  if (given.empty()) return FloatVec(static_cast<size_t>(n), 0.0f);
  H3RT_CHECK(size_of(given) == n, what, " latent image: ", given.size(), " values, expected ",
             shape_str(want));
  return to_rows();
}

void snap(FloatVec& rows, const FloatVec& mask, const FloatVec& clean) {
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i] == 0.0f) rows[i] = clean[i];
}

}  // namespace

Inpaint::Inpaint(const Request& r, const H3Config& c, const SamplerPlan& plan) : plan_(plan) {
  const Conditioning& k = r.conditioning;
  const SequenceLayout& L = r.layout;
  if (!k.video_mask.empty()) {
    const int64_t C = c.in_channels, T = L.frames, H = L.height, W = L.width;
    video_.mask.assign(r.video_rows.size(), 1.0f);  // the mask element of each row element
    apply_video_mask(video_.mask.data(), k.video_mask.data(), C, T, H, W);
    video_.clean =
        clean_rows(k.video_latent_image, size_of(r.video_rows), "video", {1, C, T, H, W},
                   [&] { return patchify_video(k.video_latent_image.data(), C, T, H, W); });
    video_.clean_out = video_.clean;
    video_.noise = r.video_rows;
  }
  if (!k.audio_mask.empty()) {
    const int64_t C = c.audio_channels, N = L.audio_len;
    audio_.mask.assign(r.audio_rows.size(), 1.0f);
    apply_audio_mask(audio_.mask.data(), k.audio_mask.data(), C, N);
    audio_.clean_out =
        clean_rows(k.audio_latent_image, size_of(r.audio_rows), "audio", {2, C, N},
                   [&] { return audio_latents_to_rows(k.audio_latent_image.data(), C, N); });
    audio_.clean = audio_.clean_out;  // process_latent_in: the carried audio's scale
    const float scale = static_cast<float>(plan.audio_scale);
    if (scale != 1.0f)
      for (float& x : audio_.clean) x *= scale;
    audio_.noise = r.audio_rows;
  }
}

void Inpaint::initial(FloatVec& video, FloatVec& audio) const {
  const float sigma0 = plan_.video_sigmas[0];
  for (auto [s, rows] : {std::pair{&video_, &video}, std::pair{&audio_, &audio}})
    if (!s->mask.empty())
      comfy_noise_scaling(sigma0, s->noise.data(), s->clean.data(), size_of(s->noise),
                          rows->data());
}

void Inpaint::model_state(int step, FloatVec& video, FloatVec& audio) const {
  const float sigma = plan_.steps.at(step).sigma_video;  // the sampler's sigma of the call
  for (auto [s, rows] : {std::pair{&video_, &video}, std::pair{&audio_, &audio}})
    if (!s->mask.empty())
      comfy_inpaint_input(rows->data(), s->mask.data(), s->noise.data(), s->clean.data(),
                          size_of(*rows), sigma, rows->data());
}

void Inpaint::mask_velocities(ForwardOutputs& v) const {
  for (auto [s, vel] :
       {std::pair{&video_, &v.video_velocity}, std::pair{&audio_, &v.audio_velocity}})
    for (size_t i = 0; i < s->mask.size(); ++i) (*vel)[i] *= s->mask[i];
}

void Inpaint::denoised(FloatVec& video, FloatVec& audio) const {
  for (auto [s, den] : {std::pair{&video_, &video}, std::pair{&audio_, &audio}})
    if (!s->mask.empty())
      comfy_inpaint_denoised(den->data(), s->mask.data(), s->clean.data(), size_of(*den));
}

void Inpaint::keep_clean(FloatVec& video, FloatVec& audio) const {
  snap(video, video_.mask, video_.clean_out);
  snap(audio, audio_.mask, audio_.clean_out);
}

}  // namespace h3rt
