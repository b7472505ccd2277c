// The samplers' per-element arithmetic and per-step scalars, shared verbatim by the host loops
// (euler.cpp, comfy_sampler.cpp) and the device loop (update_cuda.cu), so that a sampling run
// gives the same bits with its state on either side. Every operation is one fp:: op: float32,
// one rounding each, never contracted into an FMA. The scalars are computed on the host once per
// step (update_scalars.h, defined in euler.cpp and comfy_sampler.cpp); the element functions take
// them by value.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "sampler/fp_exact.h"

namespace h3rt::update {

H3RT_HD inline float round_bf16(float x) {
  return bits_float(bf16_bits_rne(x) << 16);
}

// ---- the reference scheduler's Euler step (euler_step in h3rt/sampler.h) ----
struct EulerRf {
  float one_minus_t = 0, r = 0, one_minus_r = 0;
  bool last = false;  // sigma_next == 0: x = x0
};
H3RT_HD inline float euler_rf(float x, float v, const EulerRf& c) {
  const float x0 = fp::add(x, fp::mul(c.one_minus_t, v));
  if (c.last) return x0;
  return fp::add(fp::mul(c.r, x), fp::mul(c.one_minus_r, x0));
}

// ---- ComfyUI's loop (comfy_sampler.cpp) ----
// The model input of a stream: the video cast to bf16 for a bf16 model; the carried audio
// f32(y * carry), with y, carry and the result rounded to bf16 for a bf16 model.
H3RT_HD inline float video_model_input(float x, bool bf16_model) {
  return bf16_model ? round_bf16(x) : x;
}
H3RT_HD inline float audio_model_input(float y, float carry, bool bf16_model) {
  if (!bf16_model) return fp::mul(y, carry);
  return round_bf16(fp::mul(round_bf16(y), round_bf16(carry)));
}

// denoised = f32(x - f32(out * sigma)) with out = -v; for the carried audio (carried = true)
// out = f32(f32(keep * x_net) + f32(gain * -v)), the first product rounded to bf16 for a bf16
// model.
struct Denoised {
  float sigma = 0;
  bool carried = false, bf16_model = false;
  float keep = 0, gain = 0;
};
H3RT_HD inline float denoised(float x, float v, float x_net, const Denoised& d) {
  if (!d.carried) return fp::sub(x, fp::mul(-v, d.sigma));
  float a = fp::mul(d.keep, x_net);
  if (d.bf16_model) a = round_bf16(a);
  const float out = fp::add(a, fp::mul(d.gain, -v));
  return fp::sub(x, fp::mul(out, d.sigma));
}

// One ComfyUI update of x given its denoised (and the previous denoised / the noise).
enum class ComfyKind : int32_t { euler, res, ancestral, to_denoised };
struct ComfyUpdate {
  ComfyKind kind = ComfyKind::euler;
  float sigma = 0, dt = 0;                 // euler: x + ((x - den) / sigma) * dt
  float decay = 0, h = 0, b1 = 0, b2 = 0;  // res: decay x + h (b1 den + b2 old)
  float ratio = 0, keep = 0, rescale = 0;  // ancestral: rescale (ratio x + keep den)
  float renoise = 0;                       //   + noise renoise
  bool store_old = false;                  // res_multistep keeps den for the next step
};
H3RT_HD inline float comfy_update(float x, float den, float old, float noise,
                                  const ComfyUpdate& u) {
  switch (u.kind) {
    case ComfyKind::euler:
      return fp::add(x, fp::mul(fp::div(fp::sub(x, den), u.sigma), u.dt));
    case ComfyKind::res:
      return fp::add(fp::mul(u.decay, x),
                     fp::mul(u.h, fp::add(fp::mul(u.b1, den), fp::mul(u.b2, old))));
    case ComfyKind::ancestral: {
      const float mixed = fp::add(fp::mul(u.ratio, x), fp::mul(u.keep, den));
      const float s_noise = 1.0f;
      return fp::add(fp::mul(u.rescale, mixed), fp::mul(fp::mul(noise, s_noise), u.renoise));
    }
    case ComfyKind::to_denoised:
      return den;
  }
  return x;
}

}  // namespace h3rt::update
