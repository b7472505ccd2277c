// The samplers' device updates (sampler/update_cuda.h) against the host loops' public functions
// (comfy_audio_model_input, comfy_denoised[_carried], comfy_sampler_step, sampler_step) on fresh
// random states and velocities, step after step of real plans: every value bit for bit.
#include <gtest/gtest.h>

#include <random>

#include "../cpu/test_util.h"
#include "../cpu/variant_files.h"
#include "cuda/arena.h"
#include "cuda_test_util.h"
#include "h3rt/sampler.h"
#include "sampler/noise_cuda.h"
#include "sampler/update_cuda.h"
#include "sampler/update_scalars.h"

namespace h3rt {
namespace {

FloatVec random_values(std::mt19937& g, int64_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  FloatVec v(static_cast<size_t>(n));
  for (float& x : v) x = d(g);
  return v;
}

struct Dev {
  Tensor t;
  explicit Dev(int64_t n) : t(cuda::device_empty(DType::f32, {std::max<int64_t>(n, 1)})) {}
  float* p() { return t.ptr<float>(); }
  void put(const FloatVec& v) {
    ASSERT_EQ(cudaMemcpy(p(), v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
  FloatVec get(int64_t n) {
    FloatVec v(static_cast<size_t>(n));
    EXPECT_EQ(cudaMemcpy(v.data(), p(), n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

// One stream's device state: latent, network input, velocity, previous denoised, noise.
struct StreamDev {
  int64_t n;
  Dev x, in, v, old, noise;
  explicit StreamDev(int64_t m) : n(m), x(m), in(m), v(m), old(m), noise(m) {}
};

void comfy_steps_match(SamplerKind kind, bool bf16_model) {
  const Request r = test::small_request(*config_preset("tiny"));
  const SamplerPlan plan = make_comfy_plan(r.layout, kind, 6, 12.0, 3.0);
  ASSERT_NE(plan.audio_scale, 1.0);  // the carried audio's conversions run
  std::mt19937 g(20261206u + static_cast<unsigned>(kind) * 2 + bf16_model);
  const int64_t vn = 3000, an = 1001;
  FloatVec xv = random_values(g, vn, 1.0f), xa = random_values(g, an, 1.0f);
  StreamDev dv(vn), da(an);
  dv.x.put(xv);
  da.x.put(xa);
  ComfyState st;
  const uint64_t seed = 77;
  for (int i = 0; i < static_cast<int>(plan.steps.size()); ++i) {
    const std::string at = std::string(sampler_name(kind)) + " step " + std::to_string(i);
    const FloatVec vv = random_values(g, vn, 0.7f), va = random_values(g, an, 0.7f);
    // Host: ComfyUI's loop as sample() runs it.
    FloatVec xv_in(xv), xa_in(an), dvh(vn), dah(an);
    if (bf16_model)
      for (float& x : xv_in) x = round_bf16(x);
    comfy_audio_model_input(xa.data(), an, plan.audio_carry[i], bf16_model, xa_in.data());
    comfy_denoised(xv.data(), vv.data(), vn, plan.steps[i].sigma_video, dvh.data());
    comfy_denoised_carried(plan, i, xa.data(), xa_in.data(), va.data(), an, bf16_model, dah.data());
    const update::ComfyUpdate u = update::comfy_update_scalars(plan, i, st);
    comfy_sampler_step(plan, i, st, xv.data(), dvh.data(), vn, xa.data(), dah.data(), an, seed);
    // Device.
    dv.v.put(vv);
    da.v.put(va);
    for (StreamDev* s : {&dv, &da}) {
      const bool audio = s == &da;
      update::ModelInputCudaParams mi{s->x.p(), s->in.p(),  s->n,
                                      audio,    bf16_model, audio ? plan.audio_carry[i] : 1.0f};
      ASSERT_EQ(update::model_input_cuda(mi, nullptr), cudaSuccess);
      update::ComfyStepCudaParams p;
      p.x = s->x.p();
      p.v = s->v.p();
      p.x_net = s->in.p();
      p.old = s->old.p();
      p.n = s->n;
      p.d = audio ? update::audio_denoised_scalars(plan, i, bf16_model)
                  : update::video_denoised_scalars(plan, i);
      p.u = u;
      if (u.kind == update::ComfyKind::ancestral) {
        GaussianNoiseParams np{seed, audio ? 4u : 3u, int64_t(i) * s->n, s->noise.p(), s->n};
        ASSERT_EQ(gaussian_noise_cuda(np, nullptr), cudaSuccess);
        p.noise = s->noise.p();
      }
      ASSERT_EQ(update::comfy_step_cuda(p, nullptr), cudaSuccess);
    }
    test::expect_same_bits(da.in.get(an), xa_in, at + " audio network input");
    if (bf16_model) test::expect_same_bits(dv.in.get(vn), xv_in, at + " video network input");
    test::expect_same_bits(dv.x.get(vn), xv, at + " video");
    test::expect_same_bits(da.x.get(an), xa, at + " audio");
    if (u.store_old) test::expect_same_bits(da.old.get(an), st.old_audio, at + " old audio");
  }
}

TEST(SamplerUpdateCuda, ComfySamplersMatchTheHostLoopBitForBit) {
  H3RT_REQUIRE_GPU();
  for (SamplerKind k :
       {SamplerKind::euler, SamplerKind::res_multistep, SamplerKind::euler_ancestral})
    for (bool bf16 : {false, true}) comfy_steps_match(k, bf16);
}

TEST(SamplerUpdateCuda, ReferenceEulerMatchesSamplerStep) {
  H3RT_REQUIRE_GPU();
  const Request r = test::small_request(*config_preset("tiny"));
  const SamplerPlan plan = make_sampler_plan(r.layout, 7);
  std::mt19937 g(4242);
  const int64_t vn = 5000, an = 999;
  FloatVec xv = random_values(g, vn, 1.0f), xa = random_values(g, an, 1.0f);
  Dev xvd(vn), xad(an), vvd(vn), vad(an);
  xvd.put(xv);
  xad.put(xa);
  for (int i = 0; i < static_cast<int>(plan.steps.size()); ++i) {
    const FloatVec vv = random_values(g, vn, 0.5f), va = random_values(g, an, 0.5f);
    sampler_step(plan, i, xv.data(), vv.data(), vn, xa.data(), va.data(), an);
    vvd.put(vv);
    vad.put(va);
    const SamplerStep& s = plan.steps[i];
    ASSERT_EQ(update::euler_rf_cuda(
                  {xvd.p(), vvd.p(), vn,
                   update::euler_rf_scalars(s.t_video, s.sigma_video, s.sigma_video_next)},
                  nullptr),
              cudaSuccess);
    ASSERT_EQ(update::euler_rf_cuda(
                  {xad.p(), vad.p(), an,
                   update::euler_rf_scalars(s.t_audio, s.sigma_audio, s.sigma_audio_next)},
                  nullptr),
              cudaSuccess);
    test::expect_same_bits(xvd.get(vn), xv, "video step " + std::to_string(i));
    test::expect_same_bits(xad.get(an), xa, "audio step " + std::to_string(i));
  }
}

TEST(SamplerUpdateCuda, RejectsMissingBuffers) {
  H3RT_REQUIRE_GPU();
  update::ComfyStepCudaParams p;
  p.n = 4;
  EXPECT_EQ(update::comfy_step_cuda(p, nullptr), cudaErrorInvalidValue);
  Dev x(4), v(4);
  p.x = x.p();
  p.v = v.p();
  p.u.kind = update::ComfyKind::res;  // needs old
  EXPECT_EQ(update::comfy_step_cuda(p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(update::euler_rf_cuda({nullptr, v.p(), 4, {}}, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace h3rt
