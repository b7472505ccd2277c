// The samplers' per-element updates on the device (a sampling loop whose state stays in device
// memory, pipeline/device_loop.h). Each kernel runs update_math.h's code, whose fp:: operations
// are _rn intrinsics on the device, so the results are bit-identical to the host loops for the
// same scalars (update_scalars.h). Layout: contiguous float32 device arrays of n values; a
// grid-stride loop, one element per thread and iteration. Plain CUDA: every listed arch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sampler/update_math.h"

namespace h3rt::update {

// x = euler_rf(x, v) in place (the reference scheduler's step).
struct EulerRfCudaParams {
  float* x = nullptr;
  const float* v = nullptr;
  int64_t n = 0;
  EulerRf c;
};
cudaError_t euler_rf_cuda(const EulerRfCudaParams& p, cudaStream_t s);

// The network's input of one stream of ComfyUI's loop: video_model_input, or with `audio` the
// carried audio's audio_model_input.
struct ModelInputCudaParams {
  const float* x = nullptr;
  float* x_in = nullptr;
  int64_t n = 0;
  bool audio = false, bf16_model = false;
  float carry = 1;
};
cudaError_t model_input_cuda(const ModelInputCudaParams& p, cudaStream_t s);

// One stream of a ComfyUI step: den = denoised(x, v, x_net); x = comfy_update(x, den, old,
// noise); old = den when u.store_old. x_net is read only for a carried stream, old only for
// res, noise only for ancestral (else they may be null).
struct ComfyStepCudaParams {
  float* x = nullptr;
  const float* v = nullptr;
  const float* x_net = nullptr;
  float* old = nullptr;
  const float* noise = nullptr;
  int64_t n = 0;
  Denoised d;
  ComfyUpdate u;
};
cudaError_t comfy_step_cuda(const ComfyStepCudaParams& p, cudaStream_t s);

}  // namespace h3rt::update
