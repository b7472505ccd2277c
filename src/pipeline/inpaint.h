// The sampler side of a request's denoise masks (internal to src/pipeline): ComfyUI's
// KSamplerX0Inpaint and noise_scaling with the clean latent (latent_image), on the loop's rows.
#pragma once

#include "h3rt/pipeline.h"

namespace h3rt {

// Built once per run from the request's masks and clean latents (Conditioning). Without masks
// every call changes nothing. Per stream: the mask per row element, the clean latent in the
// sampler's space (the carried audio: times the plan's audio_scale, as process_latent_in) and in
// the output's, and the starting noise (the request's rows).
class Inpaint {
 public:
  Inpaint(const Request& request, const H3Config& config, const SamplerPlan& plan);
  // The first latent: noise_scaling(sigma_0, noise, clean) for a masked stream.
  void initial(FloatVec& video_rows, FloatVec& audio_rows) const;
  // The rows the model sees at step i in place of the sampler's (blended in place).
  void model_state(int step, FloatVec& video_rows, FloatVec& audio_rows) const;
  // MiniMaxH3Model.forward's output mask (each velocity element times its mask element).
  void mask_velocities(ForwardOutputs& v) const;
  // The denoised of a model call, blended with the clean latent (in place).
  void denoised(FloatVec& video, FloatVec& audio) const;
  // After the loop (the audio uncarried): elements with mask 0 are the clean latent exactly.
  void keep_clean(FloatVec& video_rows, FloatVec& audio_rows) const;
  // Whether either stream is masked (else every call above changes nothing).
  bool active() const { return !video_.mask.empty() || !audio_.mask.empty(); }

 private:
  struct Stream {
    FloatVec mask, clean, clean_out, noise;  // empty mask: the stream is not masked
  };
  const SamplerPlan& plan_;
  Stream video_, audio_;
};

}  // namespace h3rt
