// A sampling loop's state in device memory (internal to src/pipeline): the latent rows, the
// network's inputs, the velocities and res_multistep's previous denoised, stepped on one stream
// by the update kernels (sampler/update_cuda.h). With it the loop hands the CUDA denoiser device
// rows (ForwardInputs::device), nothing crosses to the host between steps, and the host's work
// per step is the step's scalars and a few launches. Bit-identical to the host loop: the same
// update_math.h arithmetic on the same scalars.
#pragma once

#include <cstdint>
#include <memory>

#include "h3rt/model.h"
#include "h3rt/sampler.h"
#include "pipeline/resume.h"
#include "sampler/update_math.h"

namespace h3rt {

class DeviceLoop {
 public:
  // Buffers for video_n video and audio_n audio values on the current device; null in a build
  // without CUDA.
  static std::unique_ptr<DeviceLoop> create(int64_t video_n, int64_t audio_n);
  virtual ~DeviceLoop() = default;

  // The state in (latents; res_multistep's previous denoised when the state has one) and out
  // (waits for the device).
  virtual void upload(const resume::LoopState& st) = 0;
  virtual void download(resume::LoopState& st) = 0;

  // The denoiser's rows: the network inputs of ComfyUI's loop (comfy_inputs writes them) or the
  // latents themselves (the reference loop), and the velocity buffers.
  virtual const DeviceIO* io(bool comfy) = 0;
  // ComfyUI's loop: the network inputs of this step's state.
  virtual void comfy_inputs(bool bf16_model, float carry) = 0;
  // ComfyUI's loop: this step's update of both streams (the ancestral noise drawn on the device
  // for step `step` of `seed`, as ancestral_noise draws it).
  virtual void comfy_step(const update::Denoised& video, const update::Denoised& audio,
                          const update::ComfyUpdate& u, uint64_t seed, int step) = 0;
  // The reference loop: step `step` of `plan` (sampler_step) on both streams.
  virtual void euler_step(const SamplerPlan& plan, int step) = 0;
  // Blocks until the queued work is done.
  virtual void wait() = 0;
};

}  // namespace h3rt
