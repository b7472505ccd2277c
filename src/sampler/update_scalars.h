// The per-step scalars of the samplers' updates (update_math.h), computed on the host from the
// plan and the multistep state: what the host loops and the device loop (update_cuda.h) both
// apply, so that the two give the same bits.
#pragma once

#include "h3rt/sampler.h"
#include "sampler/update_math.h"

namespace h3rt::update {

// euler_step's scalars (throws for sigma <= 0).
EulerRf euler_rf_scalars(float t, float sigma, float sigma_next);

// Step `step` of a simple plan: the denoised conversion of the video and of the carried audio.
Denoised video_denoised_scalars(const SamplerPlan& plan, int step);
Denoised audio_denoised_scalars(const SamplerPlan& plan, int step, bool bf16_model);

// Step `step`'s update of a simple plan given the multistep state before it (res_multistep's
// second-order form once a previous denoised exists).
ComfyUpdate comfy_update_scalars(const SamplerPlan& plan, int step, const ComfyState& state);
// The state after that update (its old denoised buffers aside: the caller keeps them).
void advance_comfy_state(const SamplerPlan& plan, int step, ComfyState& state);

}  // namespace h3rt::update
