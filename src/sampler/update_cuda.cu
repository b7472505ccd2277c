// Grid-stride elementwise kernels over update_math.h (see update_cuda.h).
#include "cuda/runtime.h"
#include "sampler/update_cuda.h"

namespace h3rt::update {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  const int64_t want = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(want < 4096 ? want : 4096);
}

__global__ void euler_rf_kernel(float* x, const float* v, int64_t n, EulerRf c) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = euler_rf(x[i], v[i], c);
}

__global__ void model_input_kernel(const float* x, float* x_in, int64_t n, bool audio, bool bf16,
                                   float carry) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x_in[i] = audio ? audio_model_input(x[i], carry, bf16) : video_model_input(x[i], bf16);
}

__global__ void comfy_step_kernel(ComfyStepCudaParams p) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.n; i += stride) {
    const float den = denoised(p.x[i], p.v[i], p.d.carried ? p.x_net[i] : 0.0f, p.d);
    const float old = p.u.kind == ComfyKind::res ? p.old[i] : 0.0f;
    const float noise = p.u.kind == ComfyKind::ancestral ? p.noise[i] : 0.0f;
    p.x[i] = comfy_update(p.x[i], den, old, noise, p.u);
    if (p.u.store_old) p.old[i] = den;
  }
}

}  // namespace

cudaError_t euler_rf_cuda(const EulerRfCudaParams& p, cudaStream_t s) {
  if (p.n < 0 || (p.n > 0 && (!p.x || !p.v))) return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  euler_rf_kernel<<<grid_for(p.n), kThreads, 0, s>>>(p.x, p.v, p.n, p.c);
  return H3RT_LAUNCH_CHECK("euler_rf");
}

cudaError_t model_input_cuda(const ModelInputCudaParams& p, cudaStream_t s) {
  if (p.n < 0 || (p.n > 0 && (!p.x || !p.x_in))) return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  model_input_kernel<<<grid_for(p.n), kThreads, 0, s>>>(p.x, p.x_in, p.n, p.audio, p.bf16_model,
                                                        p.carry);
  return H3RT_LAUNCH_CHECK("model_input");
}

cudaError_t comfy_step_cuda(const ComfyStepCudaParams& p, cudaStream_t s) {
  const bool needs_old = p.u.kind == ComfyKind::res || p.u.store_old;
  if (p.n < 0 || (p.n > 0 && (!p.x || !p.v || (p.d.carried && !p.x_net) || (needs_old && !p.old) ||
                              (p.u.kind == ComfyKind::ancestral && !p.noise))))
    return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  comfy_step_kernel<<<grid_for(p.n), kThreads, 0, s>>>(p);
  return H3RT_LAUNCH_CHECK("comfy_step");
}

}  // namespace h3rt::update
