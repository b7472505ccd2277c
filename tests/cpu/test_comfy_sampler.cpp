// ComfyUI's simple schedule, model-side times, audio carry and samplers (euler, res_multistep,
// euler_ancestral): sigmas against values written out from the formula, times and carry against
// ComfyUI's captured forward (golden/h3_tiny_comfy), and whole sampling runs of the library loop
// against a straightforward float32 implementation of ComfyUI's Python written here.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "h3rt/formats.h"
#include "h3rt/pipeline.h"
#include "h3rt/safetensors.h"
#include "test_util.h"

namespace h3rt {
namespace {

using test::bits;
using test::expect_same_bits;

// One IEEE float32 rounding per op (the volatile keeps GCC from fusing products into FMAs).
float M(float a, float b) {
  volatile float p = a * b;
  return p;
}

// ---------------------------------------------------------------- the simple schedule

// sigma = f32(12 t) / f32(1 + f32(11 t)), t = f32(f32(f32(k/1000)*1000)/1000) at the table index
// 999 - int(x * 1000/steps) (k = index + 1); values from numpy float32 arithmetic.
TEST(ComfySchedule, Simple20StepsShift12) {
  const std::vector<float> want = {0x1p+0f,         // k 1000: t 1           -> 12 / 12
                                   0x1.fdc3a2p-1f,  // k 950:  t 0x1.e66666p-1 (0.95)
                                   0x1.fb4d8p-1f,   // k 900:  t 0x1.ccccccp-1
                                   0x1.f8946ap-1f,  // k 850:  t 0x1.b33334p-1
                                   0x1.f58d1p-1f,   // k 800:  t 0x1.99999ap-1
                                   0x1.f22984p-1f,  // k 750:  t 0.75        -> 9 / 9.25
                                   0x1.ee5846p-1f,  // k 700
                                   0x1.ea0324p-1f,  // k 650
                                   0x1.e50d78p-1f,  // k 600
                                   0x1.df51b4p-1f,  // k 550
                                   0x1.d89d8ap-1f,  // k 500:  t 0.5         -> 6 / 6.5
                                   0x1.d0ac18p-1f,  // k 450
                                   0x1.c71c72p-1f,  // k 400
                                   0x1.bb61a6p-1f,  // k 350
                                   0x1.aca6b2p-1f,  // k 300
                                   0x1.99999ap-1f,  // k 250:  t 0.25        -> 3 / 3.75
                                   0x1.8p-1f,       // k 200:  t 0x1.99999ap-3 (0.2) -> 0.75 exactly
                                   0x1.5bc60ap-1f,  // k 150
                                   0x1.24924ap-1f,  // k 100:  t 0x1.99999ap-4
                                   0x1.8c631ap-2f,  // k 50:   t 0x1.99999ap-5
                                   0.0f};           // terminal
  expect_same_bits(simple_sigmas(20, 12.0), want, "simple 20 steps shift 12");
}

TEST(ComfySchedule, Simple20StepsShift3And8StepsShift12) {
  // sigma = f32(3 t) / f32(1 + f32(2 t)) at the same 20 table indices.
  const std::vector<float> want3 = {0x1p+0f,
                                    0x1.f72c22p-1f,
                                    0x1.edb6dap-1f,
                                    0x1.e38e3ap-1f,
                                    0x1.d89d8cp-1f,
                                    0x1.ccccccp-1f,
                                    0x1.bffffep-1f,
                                    0x1.b21642p-1f,
                                    0x1.a2e8bap-1f,
                                    0x1.924928p-1f,
                                    0x1.8p-1f /* t 0.5: 1.5 / 2 */,
                                    0x1.6bca1ap-1f,
                                    0x1.555556p-1f,
                                    0x1.3c3c3ap-1f,
                                    0x1.2p-1f,
                                    0x1p-1f /* t 0.25: 0.75 / 1.5 */,
                                    0x1.b6db7p-2f,
                                    0x1.62762ap-2f,
                                    0x1p-2f,
                                    0x1.1745d2p-3f,
                                    0.0f};
  expect_same_bits(simple_sigmas(20, 3.0), want3, "simple 20 steps shift 3");
  // 8 steps: k = 1000, 875, ..., 125 (t = k / 1000 exactly in float32 here).
  const std::vector<float> want8 = {0x1p+0f,
                                    0x1.f9f9fap-1f /* 10.5 / 10.625 */,
                                    0x1.f22984p-1f,
                                    0x1.e79e7ap-1f /* 7.5 / 7.875 */,
                                    0x1.d89d8ap-1f,
                                    0x1.c18f9cp-1f /* 4.5 / 5.125 */,
                                    0x1.99999ap-1f,
                                    0x1.435e5p-1f /* 1.5 / 2.375 */,
                                    0.0f};
  expect_same_bits(simple_sigmas(8, 12.0), want8, "simple 8 steps shift 12");
}

// The same formula in the test, over many step counts and shifts (Python float64 index math).
std::vector<float> ref_simple(int steps, double shift) {
  std::vector<float> table(1000);
  for (int k = 1; k <= 1000; ++k) {
    volatile float a = static_cast<float>(k) / 1000.0f;
    const float t = M(a, 1000.0f) / 1000.0f;
    table[k - 1] = shift == 1.0 ? t
                                : M(static_cast<float>(shift), t) /
                                      (1.0f + M(static_cast<float>(shift - 1.0), t));
  }
  std::vector<float> s;
  const double ss = 1000.0 / steps;
  for (int x = 0; x < steps; ++x) {
    volatile double idx = x * ss;
    s.push_back(table[999 - static_cast<int>(idx)]);
  }
  s.push_back(0.0f);
  return s;
}

TEST(ComfySchedule, MatchesFormulaForManyStepsAndShifts) {
  for (double shift : {12.0, 3.0, 1.0, 5.0, 6.0, 0.5})
    for (int steps : {1, 2, 3, 4, 7, 8, 12, 20, 30, 50, 333, 1000})
      expect_same_bits(simple_sigmas(steps, shift), ref_simple(steps, shift),
                       "steps " + std::to_string(steps) + " shift " + std::to_string(shift));
  EXPECT_THROW(simple_sigmas(0, 12.0), Error);
  EXPECT_THROW(simple_sigmas(1001, 12.0), Error);
  EXPECT_THROW(parse_sampler("dpmpp_2m"), Error);
  EXPECT_THROW(parse_scheduler("karras"), Error);
}

// ---------------------------------------------------------------- ComfyUI's forward, captured

SafetensorsFile comfy_case(const std::string& name) {
  return SafetensorsFile::open(test::shared_dir() + "/golden/h3_tiny_comfy/" + name +
                               ".safetensors");
}

float scalar(const SafetensorsFile& f, const std::string& name) {
  return f.get(name).to_f32().at(0);
}

TEST(ComfyTimes, MatchCapturedForward) {
  for (const char* name : {"t2va", "t2va_audio_carry", "fl2va_first_sigma_tiny"}) {
    const SafetensorsFile f = comfy_case(name);
    const ComfyModelTimes m = comfy_model_times(scalar(f, "input/sigma_video"), 12.0, 3.0);
    EXPECT_EQ(bits(m.timestep), bits(scalar(f, "input/timestep"))) << name;
    const std::vector<double> sv = f.get("fwd/sigma_video").to_f64(),
                              tv = f.get("fwd/t_video").to_f64(),
                              ta = f.get("fwd/t_audio").to_f64();
    EXPECT_EQ(static_cast<double>(m.sigma_model), sv[0]) << name;
    EXPECT_EQ(bits(m.t_video), bits(static_cast<float>(tv[0]))) << name;
    EXPECT_EQ(bits(m.t_audio), bits(static_cast<float>(ta[0]))) << name;
  }
}

TEST(ComfyCarry, MatchesCapturedForwardBitForBit) {
  const SafetensorsFile f = comfy_case("t2va_audio_carry");
  const float sigma = scalar(f, "input/sigma_video");
  const ComfyModelTimes m = comfy_model_times(sigma, 12.0, 3.0);
  EXPECT_EQ(bits(m.carry), bits(scalar(f, "fwd/audio_carry")));
  EXPECT_EQ(bits(m.sigma_audio), bits(scalar(f, "fwd/sigma_audio_f32")));
  const std::vector<float> y = f.get("input/audio_rows").to_f32();
  const auto n = static_cast<int64_t>(y.size());
  std::vector<float> x_net(y.size());
  comfy_audio_model_input(y.data(), n, m.carry, false, x_net.data());
  expect_same_bits(x_net, f.get("fwd/audio_rows_network").to_f32(), "x_net");
  // forward()'s conversion: ComfyUI's returned audio output is -audio_velocity, so its
  // denoised is y - (-audio_velocity) * sigma.
  SamplerPlan p;
  p.scheduler = Scheduler::simple;
  p.audio_scale = 4.0;
  SamplerStep s;
  s.sigma_video = sigma;
  s.sigma_audio = m.sigma_audio;
  p.steps.push_back(s);
  const std::vector<float> v_net = f.get("audio_velocity_network").to_f32(),
                           v_out = f.get("audio_velocity").to_f32();
  std::vector<float> got(y.size()), want(y.size());
  comfy_denoised_carried(p, 0, y.data(), x_net.data(), v_net.data(), n, false, got.data());
  for (size_t i = 0; i < y.size(); ++i) want[i] = y[i] - M(-v_out[i], sigma);
  expect_same_bits(got, want, "carried denoised");
}

// ---------------------------------------------------------------- whole runs

// The stand-in model: velocities from the inputs and the sampler's sigma only.
void synthetic_velocity(const float* xv, int64_t nv, const float* xa, int64_t na, float sigma,
                        float* vv, float* va) {
  for (int64_t i = 0; i < nv; ++i)
    vv[i] = M(-0.5f, xv[i]) + M(0.25f, std::sin(0.37f * static_cast<float>(i % 97) + sigma));
  for (int64_t i = 0; i < na; ++i)
    va[i] = M(-0.8f, xa[i]) + M(0.125f, std::cos(0.11f * static_cast<float>(i % 89)));
}

class SyntheticDenoiser : public Denoiser {
 public:
  explicit SyntheticDenoiser(Precision p) : config_(*config_preset("tiny")), precision_(p) {}
  const H3Config& config() const override { return config_; }
  ForwardOutputs forward(const ForwardInputs& in) override {
    const int64_t nv = in.layout.video_rows() * config_.video_features();
    const int64_t na = in.layout.audio_rows() * config_.audio_channels;
    ForwardOutputs o{FloatVec(nv), FloatVec(na)};
    synthetic_velocity(in.video_rows, nv, in.audio_rows, na, in.schedule->sigma,
                       o.video_velocity.data(), o.audio_velocity.data());
    seen_timesteps.push_back(in.plan.timestep);
    return o;
  }
  std::string device_name() const override { return "synthetic"; }
  Precision precision() const override { return precision_; }
  std::vector<std::vector<float>> seen_timesteps;

 private:
  H3Config config_;
  Precision precision_;
};

float lg(float x) {
  return static_cast<float>(std::log(static_cast<double>(x)));
}

// ComfyUI's KSampler on the packed [video | audio] latent, from its Python: noise_scaling,
// MiniMaxH3Model.forward's carry, CONST.calculate_denoised, the k-diffusion samplers,
// process_latent_out's 1 / audio_scale. With a denoise mask m (per packed element, 1 generate)
// and the clean latent c (process_latent_in: audio times audio_scale = c_s), KSAMPLER.sample and
// KSamplerX0Inpaint:
//   x_0 = sigma_0 noise + (1 - sigma_0) c_s
//   per call: x_s = x m + (sigma noise + (1 - sigma) c_s)(1 - m)   (the model's x, not the loop's)
//             out = forward(x_s) * m                              (MiniMaxH3Model.forward's mask)
//             denoised = (x_s - out sigma) m + c_s (1 - m)
//   the end: elements with m = 0 set to c (h3rt's exact form of where ComfyUI's last step lands).
struct RefRun {
  std::vector<float> x;  // packed
  int64_t nv;
};
struct RefMask {
  std::vector<float> mask, clean;  // packed; clean as the caller gives it (audio unscaled)
};

RefRun ref_comfy_run(const Request& r, SamplerKind kind, int steps, double sv, double sa, bool bf16,
                     uint64_t seed, const RefMask* inpaint = nullptr) {
  const std::vector<float> sig = ref_simple(steps, sv);
  const int64_t nv = static_cast<int64_t>(r.video_rows.size()),
                na = static_cast<int64_t>(r.audio_rows.size()), n = nv + na;
  const double scale = sv / sa;
  std::vector<float> x(n), old(n), den(n), xin(n), out(n), vel(n), noise(n), xs(n), start(n),
      m(n, 1.0f), cs(n, 0.0f);
  std::copy(r.video_rows.begin(), r.video_rows.end(), start.begin());
  std::copy(r.audio_rows.begin(), r.audio_rows.end(), start.begin() + nv);
  if (inpaint) {
    m = inpaint->mask;
    cs = inpaint->clean;
    for (int64_t k = nv; k < n; ++k) cs[k] = M(cs[k], static_cast<float>(scale));
  }
  for (int64_t k = 0; k < n; ++k)
    x[k] = inpaint ? M(sig[0], start[k]) + M(1.0f - sig[0], cs[k]) : M(sig[0], start[k]);
  bool has_old = false;
  float old_sigma_down = 0;
  auto cast = [&](float v) { return bf16 ? round_bf16(v) : v; };
  for (int i = 0; i < steps; ++i) {
    const float sigma = sig[i], sigma_next = sig[i + 1];
    // model_sampling.timestep, then forward(): sigma_v, time_shift_sigma in float32, carry
    const float ts = M(sigma, 1000.0f);
    const float sm = std::max(ts / 1000.0f, static_cast<float>(1e-6));
    const float base = sm / (static_cast<float>(sv) + M(sm, static_cast<float>(1.0 - sv)));
    const float sig_a =
        M(static_cast<float>(sa), base) / (1.0f + M(static_cast<float>(sa - 1.0), base));
    const float carry = scale != 1.0 ? cast(sig_a / sm) : 1.0f;
    for (int64_t k = 0; k < n; ++k)
      xs[k] = !inpaint
                  ? x[k]
                  : M(x[k], m[k]) + M(M(sigma, start[k]) + M(1.0f - sigma, cs[k]), 1.0f - m[k]);
    for (int64_t k = 0; k < n; ++k) xin[k] = cast(xs[k]);
    for (int64_t k = nv; k < n; ++k) xin[k] = cast(M(xin[k], carry));
    synthetic_velocity(xin.data(), nv, xin.data() + nv, na, sigma, vel.data(), vel.data() + nv);
    for (int64_t k = 0; k < n; ++k) out[k] = -(inpaint ? M(vel[k], m[k]) : vel[k]);
    if (scale != 1.0) {
      const float gain = 1.0f + M(static_cast<float>(scale - 1.0), sig_a);
      for (int64_t k = nv; k < n; ++k)
        out[k] = cast(M(static_cast<float>(1.0 - scale), xin[k])) + M(gain, out[k]);
    }
    for (int64_t k = 0; k < n; ++k) den[k] = xs[k] - M(out[k], sigma);
    if (inpaint)
      for (int64_t k = 0; k < n; ++k) den[k] = M(den[k], m[k]) + M(cs[k], 1.0f - m[k]);
    if (kind == SamplerKind::euler_ancestral) {
      if (sigma_next == 0.0f) {
        x = den;
        continue;
      }
      const float ratio = 1.0f + M(sigma_next / sigma - 1.0f, 1.0f);
      const float sd = M(sigma_next, ratio), an1 = 1.0f - sigma_next, ad = 1.0f - sd;
      const float renoise =
          std::sqrt(M(sigma_next, sigma_next) - M(M(sd, sd), M(an1, an1)) / M(ad, ad));
      const float rr = sd / sigma;
      ancestral_noise(seed, i, false, noise.data(), nv);
      ancestral_noise(seed, i, true, noise.data() + nv, na);
      for (int64_t k = 0; k < n; ++k) {
        const float mix = M(rr, x[k]) + M(1.0f - rr, den[k]);
        x[k] = M(an1 / ad, mix) + M(M(noise[k], 1.0f), renoise);
      }
      continue;
    }
    const bool first_order =
        kind == SamplerKind::euler || sigma_next == 0.0f || !has_old;  // res: Euler branch
    if (first_order) {
      for (int64_t k = 0; k < n; ++k) x[k] = x[k] + M((x[k] - den[k]) / sigma, sigma_next - sigma);
    } else {
      const float t = -lg(sigma), t_old = -lg(old_sigma_down), t_next = -lg(sigma_next),
                  t_prev = -lg(sig[i - 1]);
      const float h = t_next - t, c2 = (t_prev - t_old) / h;
      const float phi1 = static_cast<float>(std::expm1(static_cast<double>(-h))) / -h;
      const float phi2 = (phi1 - 1.0f) / -h;
      const float b1 = phi1 - phi2 / c2, b2 = phi2 / c2;
      const float e = static_cast<float>(std::exp(static_cast<double>(-h)));
      for (int64_t k = 0; k < n; ++k) x[k] = M(e, x[k]) + M(h, M(b1, den[k]) + M(b2, old[k]));
    }
    old = den;
    has_old = true;
    old_sigma_down = sigma_next;
  }
  const float inv = static_cast<float>(1.0 / scale);
  for (int64_t k = nv; k < n; ++k) x[k] = M(x[k], inv);
  if (inpaint)
    for (int64_t k = 0; k < n; ++k)
      if (m[k] == 0.0f) x[k] = inpaint->clean[k];
  return {x, nv};
}

// The library's latents are the reference's packed rows, bit for bit.
void expect_equals_reference(const SampleResult& res, const RefRun& ref, const SequenceLayout& L,
                             const std::string& what) {
  expect_same_bits(res.video_latents,
                   unpatchify_video(ref.x.data(), 24, L.frames, L.height, L.width),
                   what + " video");
  expect_same_bits(res.audio_latents, audio_rows_to_latents(ref.x.data() + ref.nv, 32, L.audio_len),
                   what + " audio");
}

void expect_library_equals_reference(SamplerKind kind, int steps, double sv, double sa,
                                     Precision precision) {
  SyntheticDenoiser d(precision);
  const Request r = make_request(d.config(), {});
  SampleOptions o;
  o.steps = steps;
  o.scheduler = Scheduler::simple;
  o.sampler = kind;
  o.video_shift = sv;
  o.audio_shift = sa;
  o.noise_seed = 77;
  const SampleResult res = sample(d, r, o);
  const RefRun ref = ref_comfy_run(r, kind, steps, sv, sa, precision == Precision::bf16, 77);
  const SequenceLayout& L = r.layout;
  const std::string what = std::string(sampler_name(kind)) + " " + std::to_string(steps) +
                           " steps, shifts " + std::to_string(sv) + "/" + std::to_string(sa) +
                           (precision == Precision::bf16 ? " bf16" : " fp32");
  expect_equals_reference(res, ref, L, what);
  // The model saw ComfyUI's t_video and t_audio of every step.
  ASSERT_EQ(d.seen_timesteps.size(), static_cast<size_t>(steps));
  const std::vector<float> sig = simple_sigmas(steps, sv);
  for (int i = 0; i < steps; ++i) {
    const ComfyModelTimes m = comfy_model_times(sig[i], sv, sa);
    const std::vector<float>& seen = d.seen_timesteps[i];
    EXPECT_NE(std::find(seen.begin(), seen.end(), m.t_video), seen.end()) << what << " step " << i;
    EXPECT_NE(std::find(seen.begin(), seen.end(), m.t_audio), seen.end()) << what << " step " << i;
  }
}

TEST(ComfySampler, ResMultistepMatchesComfyFormulas) {
  expect_library_equals_reference(SamplerKind::res_multistep, 20, 12.0, 3.0, Precision::fp32);
  expect_library_equals_reference(SamplerKind::res_multistep, 8, 12.0, 3.0, Precision::bf16);
  expect_library_equals_reference(SamplerKind::res_multistep, 5, 6.0, 6.0, Precision::fp32);
}

TEST(ComfySampler, EulerMatchesComfyFormulas) {
  expect_library_equals_reference(SamplerKind::euler, 20, 12.0, 3.0, Precision::fp32);
  expect_library_equals_reference(SamplerKind::euler, 4, 12.0, 3.0, Precision::bf16);
  expect_library_equals_reference(SamplerKind::euler, 7, 5.0, 2.0, Precision::fp32);
}

TEST(ComfySampler, EulerAncestralMatchesComfyFormulas) {
  expect_library_equals_reference(SamplerKind::euler_ancestral, 8, 12.0, 3.0, Precision::fp32);
  expect_library_equals_reference(SamplerKind::euler_ancestral, 3, 12.0, 3.0, Precision::bf16);
}

TEST(ComfySampler, SamplersDifferAndDiffusersRefusesOthers) {
  SyntheticDenoiser d(Precision::fp32);
  const Request r = make_request(d.config(), {});
  SampleOptions o;
  o.steps = 6;
  o.scheduler = Scheduler::simple;
  const SampleResult euler = sample(d, r, o);
  o.sampler = SamplerKind::res_multistep;
  const SampleResult res = sample(d, r, o);
  EXPECT_NE(euler.video_latents, res.video_latents);
  EXPECT_EQ(res.video_sigmas, simple_sigmas(6, 12.0));
  o.scheduler = Scheduler::diffusers;
  try {
    sample(d, r, o);
    ADD_FAILURE() << "res_multistep ran on the diffusers scheduler";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("simple"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- denoise masks

// A request with denoise masks on its video and/or audio (values 0, 1/4, 1/2, 1 in a fixed
// pattern, each present) and seeded clean latents, and the same as the reference's packed masks.
struct MaskedRequest {
  Request r;
  RefMask ref;
};

float mask_value(int64_t i) {
  static const float kValues[] = {0.0f, 1.0f, 0.25f, 1.0f, 0.5f, 0.0f, 1.0f};
  return kValues[(i * 5 + i / 7) % 7];
}

MaskedRequest masked_request(const H3Config& c, bool video, bool audio, float fill = -1.0f) {
  MaskedRequest m{make_request(c, {}), {}};
  const SequenceLayout L = m.r.layout;
  Conditioning k;
  const int64_t nvm = L.frames * L.height * L.width, nam = 2 * L.audio_len;
  auto pattern = [&](int64_t n) {
    FloatVec v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = fill >= 0 ? fill : mask_value(i);
    return v;
  };
  const int64_t nv = static_cast<int64_t>(m.r.video_rows.size());
  const int64_t na = static_cast<int64_t>(m.r.audio_rows.size());
  k.video_latent_image.resize(nv);
  k.audio_latent_image.resize(na);
  gaussian_noise(91, 0, 0, k.video_latent_image.data(), nv);
  gaussian_noise(92, 0, 0, k.audio_latent_image.data(), na);
  if (video) k.video_mask = pattern(nvm);
  if (audio) k.audio_mask = pattern(nam);
  // The reference's packed per-element mask and clean latent, in row order.
  FloatVec vm(nv, 1.0f), am(na, 1.0f);
  if (video) apply_video_mask(vm.data(), k.video_mask.data(), 24, L.frames, L.height, L.width);
  if (audio) apply_audio_mask(am.data(), k.audio_mask.data(), 32, L.audio_len);
  const FloatVec vc = patchify_video(k.video_latent_image.data(), 24, L.frames, L.height, L.width);
  const FloatVec ac = audio_latents_to_rows(k.audio_latent_image.data(), 32, L.audio_len);
  m.ref.mask.assign(vm.begin(), vm.end());
  m.ref.mask.insert(m.ref.mask.end(), am.begin(), am.end());
  m.ref.clean.assign(vc.begin(), vc.end());
  m.ref.clean.insert(m.ref.clean.end(), ac.begin(), ac.end());
  condition_request(m.r, c, std::move(k));
  return m;
}

SampleOptions comfy_options(SamplerKind kind, int steps) {
  SampleOptions o;
  o.steps = steps;
  o.scheduler = Scheduler::simple;
  o.sampler = kind;
  o.noise_seed = 77;
  return o;
}

void expect_masked_run_equals_reference(SamplerKind kind, int steps, Precision precision,
                                        bool video, bool audio) {
  SyntheticDenoiser d(precision);
  const MaskedRequest m = masked_request(d.config(), video, audio);
  const SampleResult res = sample(d, m.r, comfy_options(kind, steps));
  const RefRun ref =
      ref_comfy_run(m.r, kind, steps, 12.0, 3.0, precision == Precision::bf16, 77, &m.ref);
  const SequenceLayout& L = m.r.layout;
  const std::string what = std::string(sampler_name(kind)) + (video ? " video mask" : "") +
                           (audio ? " audio mask" : "") +
                           (precision == Precision::bf16 ? " bf16" : " fp32");
  expect_equals_reference(res, ref, L, what);
  // The masks reached the model's per-row timesteps: masked rows have timesteps of their own.
  ASSERT_FALSE(d.seen_timesteps.empty());
  EXPECT_GT(d.seen_timesteps[0].size(), 2u) << what;
}

TEST(ComfySamplerMasks, PartialMasksMatchTheInpaintFormulas) {
  for (SamplerKind k :
       {SamplerKind::euler, SamplerKind::res_multistep, SamplerKind::euler_ancestral}) {
    expect_masked_run_equals_reference(k, 4, Precision::fp32, true, false);  // video mask
    expect_masked_run_equals_reference(k, 4, Precision::fp32, false, true);  // audio mask
    expect_masked_run_equals_reference(k, 3, Precision::bf16, true, true);   // both
  }
}

TEST(ComfySamplerMasks, OnesAreTheUnmaskedRunAndZerosTheCleanLatent) {
  auto d = Denoiser::create(ModelSource{}, {});  // the tiny model, CPU fp32
  RequestOptions ro;
  ro.frames = 5;
  ro.width = ro.height = 64;
  Request plain = make_request(d->config(), ro);
  condition_request(plain, d->config(), {});  // ComfyUI's t2va semantics, no mask
  const SampleOptions o = comfy_options(SamplerKind::res_multistep, 3);
  const SampleResult want = sample(*d, plain, o);
  for (const float fill : {1.0f, 0.0f}) {
    Request r = make_request(d->config(), ro);
    const SequenceLayout L = r.layout;
    Conditioning k;
    k.video_mask.assign(L.frames * L.height * L.width, fill);
    k.audio_mask.assign(2 * L.audio_len, fill);
    k.video_latent_image.resize(r.video_rows.size());
    k.audio_latent_image.resize(r.audio_rows.size());
    gaussian_noise(5, 0, 0, k.video_latent_image.data(),
                   static_cast<int64_t>(k.video_latent_image.size()));
    gaussian_noise(6, 0, 0, k.audio_latent_image.data(),
                   static_cast<int64_t>(k.audio_latent_image.size()));
    const FloatVec clean_v = k.video_latent_image, clean_a = k.audio_latent_image;
    condition_request(r, d->config(), std::move(k));
    const SampleResult got = sample(*d, r, o);
    if (fill == 1.0f) {
      expect_same_bits(got.video_latents, want.video_latents, "mask of ones: video");
      expect_same_bits(got.audio_latents, want.audio_latents, "mask of ones: audio");
    } else {
      expect_same_bits(got.video_latents, clean_v, "mask of zeros: video");
      expect_same_bits(got.audio_latents, clean_a, "mask of zeros: audio");
    }
  }
}

TEST(ComfySamplerMasks, ResumeIsBitIdenticalAndRefusesOtherMasks) {
  static const test::TempDir dir("h3rt_mask_resume");
  const std::string path = dir.file("masked.resume");
  SyntheticDenoiser d(Precision::fp32);
  const MaskedRequest m = masked_request(d.config(), true, true);
  SampleOptions o = comfy_options(SamplerKind::res_multistep, 5);
  const SampleResult whole = sample(d, m.r, o);
  o.checkpoint_path = path;
  o.checkpoint_every = 2;
  o.progress = [](int done, int, double) { return done < 2; };
  EXPECT_THROW(sample(d, m.r, o), Cancelled);
  o.progress = {};
  o.checkpoint_every = 0;
  o.resume_path = path;
  const SampleResult resumed = sample(d, m.r, o);
  EXPECT_EQ(resumed.resumed_steps, 2);
  expect_same_bits(resumed.video_latents, whole.video_latents, "resumed video");
  expect_same_bits(resumed.audio_latents, whole.audio_latents, "resumed audio");
  const MaskedRequest other = masked_request(d.config(), true, true, 0.5f);
  EXPECT_THROW(sample(d, other.r, o), Error);
}

TEST(ComfySamplerMasks, MasksNeedTheSimpleScheduler) {
  SyntheticDenoiser d(Precision::fp32);
  const MaskedRequest m = masked_request(d.config(), false, true);
  SampleOptions o;
  o.steps = 2;
  try {
    sample(d, m.r, o);
    ADD_FAILURE() << "a masked run ran on the diffusers scheduler";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scheduler simple"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace h3rt
