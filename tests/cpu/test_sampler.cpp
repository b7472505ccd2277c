// Scheduler grids, per-step plans and Euler updates against the golden set, bit for bit; and
// the seeded noise generator against an independent implementation and its statistics.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "h3rt/layout.h"
#include "h3rt/safetensors.h"
#include "h3rt/sampler.h"
#include "sampler/noise.h"
#include "test_util.h"

namespace h3rt {
namespace {

using test::bits;
using test::expect_same_bits;

SafetensorsFile golden() {
  return SafetensorsFile::open(test::golden_dir() + "/golden.safetensors");
}

std::vector<int64_t> as_i64(const Tensor& t) {
  H3RT_CHECK(t.dtype() == DType::i64 && t.is_contiguous(), "expected a contiguous int64 tensor");
  return std::vector<int64_t>(t.ptr<int64_t>(), t.ptr<int64_t>() + t.numel());
}

SequenceLayout golden_layout() {
  return make_t2va_layout(10, 9, 7, 8, 12);
}

// ---------------------------------------------------------------- schedule

TEST(Schedule, AllStoredGridsBitExact) {
  const SafetensorsFile g = golden();
  int checked = 0;
  for (int shift : {12, 3})
    for (int n : {3, 4, 6, 8, 10, 16, 20, 25, 30, 40, 50}) {
      const std::string name =
          "sched/grid_shift" + std::to_string(shift) + "_n" + std::to_string(n);
      expect_same_bits(sigma_grid(n, static_cast<float>(shift)), g.get(name).to_f32(), name);
      ++checked;
    }
  EXPECT_EQ(checked, 22);
}

TEST(Schedule, BaseGridEndpointsAndMonotone) {
  for (int n : {2, 3, 7, 50, 101}) {
    const std::vector<float> b = base_grid(n);
    ASSERT_EQ(b.size(), static_cast<size_t>(n));
    EXPECT_EQ(b.front(), 1.0f);
    EXPECT_EQ(b.back(), 0.0f);
    for (int i = 1; i < n; ++i) EXPECT_LT(b[i], b[i - 1]);
  }
  EXPECT_THROW(base_grid(1), Error);
}

TEST(Schedule, TrajectoryGridsTimestepsAndPlans) {
  const SafetensorsFile g = golden();
  const SamplerPlan plan = make_sampler_plan(golden_layout(), 3);
  expect_same_bits(plan.video_sigmas, g.get("sched/video_sigmas", DType::f32, {3}).to_f32(),
                   "sched/video_sigmas");
  expect_same_bits(plan.audio_sigmas, g.get("sched/audio_sigmas", DType::f32, {3}).to_f32(),
                   "sched/audio_sigmas");
  expect_same_bits(plan.video_timesteps, g.get("sched/video_timesteps", DType::f32, {2}).to_f32(),
                   "sched/video_timesteps");
  expect_same_bits(plan.audio_timesteps, g.get("sched/audio_timesteps", DType::f32, {2}).to_f32(),
                   "sched/audio_timesteps");
  ASSERT_EQ(plan.steps.size(), 2u);
  for (int s = 0; s < 2; ++s) {
    const std::string p = "traj/step" + std::to_string(s) + "/";
    expect_same_bits(plan.steps[s].plan.timestep, g.get(p + "timestep").to_f32(), p + "timestep");
    EXPECT_EQ(plan.steps[s].plan.timestep_indices,
              as_i64(g.get(p + "timestep_indices", DType::i64, {196})))
        << p;
  }
}

TEST(Schedule, SingleForwardAudioSigma) {
  const SafetensorsFile g = golden();
  const float sv = g.get("fwd/sigma_video", DType::f32, {1}).ptr<float>()[0];
  const float sa = g.get("fwd/sigma_audio", DType::f32, {1}).ptr<float>()[0];
  EXPECT_EQ(bits(audio_sigma_from_video(sv)), bits(sa));
  // The grid relation holds: both shifts of one base value.
  EXPECT_EQ(audio_sigma_from_video(1.0f), 1.0f);
  EXPECT_EQ(audio_sigma_from_video(0.0f), 0.0f);
}

TEST(Schedule, PlanHasOneStepPerGridInterval) {
  // A shift of 1 keeps the base grid as is.
  const SamplerPlan p = make_sampler_plan(golden_layout(), 50, 12.0f, 1.0f);
  EXPECT_EQ(p.video_sigmas.size(), p.audio_sigmas.size());
  EXPECT_EQ(p.steps.size(), 49u);
  EXPECT_EQ(p.steps.back().sigma_video_next, 0.0f);
}

// A shift that is not a finite number > 0 is refused by name (before: NaN ran into a NaN
// forward, 0 into a grid-length mismatch, a negative audio shift into -inf sigmas).
TEST(Schedule, RejectsShiftsThatAreNotPositiveNumbers) {
  const SequenceLayout l = golden_layout();
  for (float bad : {0.0f, -3.0f, std::nanf(""), INFINITY}) {
    SCOPED_TRACE(bad);
    const auto names = [](const std::function<void()>& f, const char* what) {
      EXPECT_NE(test::error_of(f).find(what), std::string::npos) << test::error_of(f);
    };
    names([&] { make_sampler_plan(l, 9, bad, 3.0f); }, "video sigma shift must be");
    names([&] { make_sampler_plan(l, 9, 12.0f, bad); }, "audio sigma shift must be");
    names([&] { make_comfy_plan(l, SamplerKind::euler, 8, bad, 3.0); }, "sigma shift must be");
    names([&] { make_comfy_plan(l, SamplerKind::euler, 8, 12.0, bad); }, "audio sigma shift must");
  }
}

// ---------------------------------------------------------------- Euler

void check_trajectory(const std::string& traj) {
  const SafetensorsFile g = golden();
  const SamplerPlan plan = make_sampler_plan(golden_layout(), 3);
  std::vector<float> video = g.get("input/video_rows", DType::f32, {168, 96}).to_f32();
  std::vector<float> audio = g.get("input/audio_rows", DType::f32, {18, 32}).to_f32();
  for (int s = 0; s < 2; ++s) {
    const std::string p = traj + "/step" + std::to_string(s) + "/";
    const std::vector<float> vv = g.get(p + "video_velocity", DType::f32, {168, 96}).to_f32();
    const std::vector<float> av = g.get(p + "audio_velocity", DType::f32, {18, 32}).to_f32();
    sampler_step(plan, s, video.data(), vv.data(), static_cast<int64_t>(video.size()), audio.data(),
                 av.data(), static_cast<int64_t>(audio.size()));
    expect_same_bits(video, g.get(p + "video_rows_after").to_f32(), p + "video_rows_after");
    expect_same_bits(audio, g.get(p + "audio_rows_after").to_f32(), p + "audio_rows_after");
  }
  expect_same_bits(unpatchify_video(video.data(), 24, 7, 8, 12),
                   g.get(traj + "/final_video_latents", DType::f32, {1, 24, 7, 8, 12}).to_f32(),
                   traj + "/final_video_latents");
  expect_same_bits(audio_rows_to_latents(audio.data(), 32, 9),
                   g.get(traj + "/final_audio_latents", DType::f32, {2, 32, 9}).to_f32(),
                   traj + "/final_audio_latents");
}

TEST(Euler, TrajectoryF32BitExact) {
  check_trajectory("traj_f32");
}
TEST(Euler, TrajectoryBf16BitExact) {
  check_trajectory("traj_bf16");
}

TEST(Euler, MatchesAlgebraicFormWithinRounding) {
  // x_next = x + (sigma - sigma_next) v up to float32 rounding.
  std::vector<float> x(1000), v(1000);
  gaussian_noise(7, 0, 0, x.data(), 1000);
  gaussian_noise(7, 1, 0, v.data(), 1000);
  std::vector<float> y = x;
  const float sigma = 0.8f, sigma_next = 0.55f, t = 1.0f - sigma;
  euler_step(y.data(), v.data(), 1000, t, sigma, sigma_next);
  for (int i = 0; i < 1000; ++i)
    EXPECT_NEAR(y[i], x[i] + (static_cast<double>(sigma) - sigma_next) * v[i], 4e-6) << i;
}

// ---------------------------------------------------------------- noise

// A second Philox4x32-10, written independently: the 32x32 -> 64 product from 16-bit limbs,
// the round keys precomputed.
void philox_ref(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  auto mul64 = [](uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
    const uint32_t a0 = a & 0xFFFF, a1 = a >> 16, b0 = b & 0xFFFF, b1 = b >> 16;
    const uint64_t mid = static_cast<uint64_t>(a0 * b1) + static_cast<uint64_t>(a1 * b0);
    const uint64_t p =
        static_cast<uint64_t>(a0 * b0) + (mid << 16) + (static_cast<uint64_t>(a1 * b1) << 32);
    *hi = static_cast<uint32_t>(p >> 32);
    *lo = static_cast<uint32_t>(p);
  };
  uint32_t rk[10][2];
  for (int r = 0; r < 10; ++r) {
    rk[r][0] = key[0] + static_cast<uint32_t>(r) * 0x9E3779B9u;
    rk[r][1] = key[1] + static_cast<uint32_t>(r) * 0xBB67AE85u;
  }
  uint32_t x[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
  for (int r = 0; r < 10; ++r) {
    uint32_t h0, l0, h1, l1;
    mul64(x[0], 0xD2511F53u, &h0, &l0);
    mul64(x[2], 0xCD9E8D57u, &h1, &l1);
    const uint32_t y[4] = {h1 ^ x[1] ^ rk[r][0], l1, h0 ^ x[3] ^ rk[r][1], l0};
    std::memcpy(x, y, sizeof x);
  }
  std::memcpy(out, x, sizeof x);
}

// Value i of (seed, stream) from the contract, in float64 with the C library's log/cos/sin.
double normal_ref(uint64_t seed, uint64_t stream, uint64_t i) {
  const uint64_t blk = i >> 2;
  const uint32_t ctr[4] = {
      static_cast<uint32_t>(blk & 0xFFFFFFFFu), static_cast<uint32_t>(blk >> 32),
      static_cast<uint32_t>(stream & 0xFFFFFFFFu), static_cast<uint32_t>(stream >> 32)};
  const uint32_t key[2] = {static_cast<uint32_t>(seed & 0xFFFFFFFFu),
                           static_cast<uint32_t>(seed >> 32)};
  uint32_t w[4];
  philox_ref(ctr, key, w);
  const int lane = static_cast<int>(i & 3);
  const uint32_t a = w[lane & 2], b = w[(lane & 2) + 1];
  const double u = (std::floor(a / 512.0) * 2.0 + 1.0) / 16777216.0;
  const double angle = 2.0 * 3.14159265358979323846 * std::floor(b / 256.0) / 16777216.0;
  const double r = std::sqrt(-2.0 * std::log(u));
  return (lane & 1) ? r * std::sin(angle) : r * std::cos(angle);
}

TEST(Noise, PhiloxMatchesPublishedKnownAnswers) {
  // Random123 known-answer vectors for Philox4x32-10.
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const noise::Words4 got = noise::philox4x32_10(
        noise::Words4{{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0], k.key[1]);
    uint32_t ref[4];
    philox_ref(k.ctr, k.key, ref);
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(got.v[j], k.out[j]) << "word " << j;
      EXPECT_EQ(ref[j], k.out[j]) << "reference word " << j;
    }
  }
}

TEST(Noise, FirstValuesMatchIndependentImplementation) {
  for (uint64_t seed : {0ull, 1ull, 42ull, 0x123456789abcdefull})
    for (uint64_t stream : {0ull, 1ull}) {
      float got[8];
      gaussian_noise(seed, stream, 0, got, 8);
      for (int i = 0; i < 8; ++i)
        EXPECT_NEAR(got[i], normal_ref(seed, stream, i),
                    1e-6 * std::max(1.0, std::fabs(static_cast<double>(got[i]))))
            << "seed " << seed << " stream " << stream << " value " << i;
    }
}

TEST(Noise, MillionValuesCloseToFloat64BoxMuller) {
  const int64_t n = 1 << 20;
  std::vector<float> z(n);
  gaussian_noise(2024, 3, 0, z.data(), n);
  double max_err = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double ref = normal_ref(2024, 3, static_cast<uint64_t>(i));
    max_err = std::max(max_err, std::fabs(z[i] - ref) / std::max(1.0, std::fabs(ref)));
  }
  // Measured 2.4e-7 (a few float32 roundings); an error in a quadrant, a lane or a
  // coefficient shows up as 1e-4 or more.
  EXPECT_LT(max_err, 1e-6);
}

TEST(Noise, DeterministicOffsetsAndStreams) {
  const int64_t n = 4099;
  std::vector<float> a(n), b(n), c(n), d(n);
  gaussian_noise(11, 0, 0, a.data(), n);
  gaussian_noise(11, 0, 0, b.data(), n);
  expect_same_bits(a, b, "same seed twice");
  for (int64_t off : {1, 2, 3, 5, 1000}) {
    std::vector<float> part(n - off - 7);
    gaussian_noise(11, 0, off, part.data(), static_cast<int64_t>(part.size()));
    expect_same_bits(part, std::vector<float>(a.begin() + off, a.begin() + off + part.size()),
                     "offset " + std::to_string(off));
  }
  gaussian_noise(12, 0, 0, c.data(), n);
  gaussian_noise(11, 1, 0, d.data(), n);
  int same_seed = 0, same_stream = 0;
  for (int64_t i = 0; i < n; ++i) {
    same_seed += a[i] == c[i];
    same_stream += a[i] == d[i];
  }
  EXPECT_LT(same_seed, 3);
  EXPECT_LT(same_stream, 3);
  // Seeds differing only in the high word differ too.
  gaussian_noise(11 + (1ull << 32), 0, 0, c.data(), n);
  int same_hi = 0;
  for (int64_t i = 0; i < n; ++i) same_hi += a[i] == c[i];
  EXPECT_LT(same_hi, 3);
  EXPECT_THROW(gaussian_noise(1, 0, -1, a.data(), 1), Error);
}

TEST(Noise, MillionSampleMoments) {
  const int64_t n = 1 << 20;
  std::vector<float> z(n);
  gaussian_noise(99, 0, 0, z.data(), n);
  double s1 = 0, s2 = 0, s3 = 0, s4 = 0, lag = 0;
  int64_t within1 = 0, beyond3 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = z[i];
    ASSERT_TRUE(std::isfinite(x));
    s1 += x;
    s2 += x * x;
    s3 += x * x * x;
    s4 += x * x * x * x;
    if (i > 0) lag += x * z[i - 1];
    within1 += std::fabs(x) < 1.0;
    beyond3 += std::fabs(x) > 3.0;
  }
  const double mean = s1 / n, var = s2 / n - mean * mean;
  // Bounds at about 5 standard errors for n = 2^20.
  EXPECT_LT(std::fabs(mean), 0.005);
  EXPECT_LT(std::fabs(var - 1.0), 0.007);
  EXPECT_LT(std::fabs(s3 / n), 0.012);       // skewness, se sqrt(6/n)
  EXPECT_LT(std::fabs(s4 / n - 3.0), 0.05);  // kurtosis, se sqrt(96/n)
  EXPECT_LT(std::fabs(lag / n), 0.005);      // lag-1 correlation
  EXPECT_NEAR(static_cast<double>(within1) / n, 0.682689, 0.0023);
  EXPECT_NEAR(static_cast<double>(beyond3) / n, 0.0026998, 0.00026);
}

TEST(Noise, InitialNoiseDrawOrder) {
  const SequenceLayout lay = golden_layout();
  const InitialNoise init = initial_noise(5, lay);
  ASSERT_EQ(init.video_rows.size(), 168u * 96);
  ASSERT_EQ(init.audio_rows.size(), 18u * 32);
  std::vector<float> latent(24 * 7 * 8 * 12), audio(18 * 32);
  gaussian_noise(5, kVideoNoiseStream, 0, latent.data(), static_cast<int64_t>(latent.size()));
  gaussian_noise(5, kAudioNoiseStream, 0, audio.data(), static_cast<int64_t>(audio.size()));
  expect_same_bits(init.video_rows, patchify_video(latent.data(), 24, 7, 8, 12), "video rows");
  expect_same_bits(init.audio_rows, audio, "audio rows");
}

// det_log / det_sin / det_cos on their whole input ranges, against float64.
TEST(Noise, FixedTranscendentalsAreAccurate) {
  double log_err = 0, trig_err = 0;
  for (uint32_t k = 0; k < (1u << 23); k += 97) {
    const float u = static_cast<float>(2 * k + 1) * 0x1p-24f;
    log_err = std::max(log_err, std::fabs(noise::det_log(u) - std::log(static_cast<double>(u))) /
                                    std::fabs(std::log(static_cast<double>(u))));
  }
  for (int32_t r = -(1 << 21); r < (1 << 21); r += 31) {
    const float a = static_cast<float>(r) * 0x1.921fb6p-22f;
    trig_err = std::max(trig_err, std::fabs(noise::det_sin(a) - std::sin(static_cast<double>(a))));
    trig_err = std::max(trig_err, std::fabs(noise::det_cos(a) - std::cos(static_cast<double>(a))));
  }
  EXPECT_LT(log_err, 3e-7);     // relative; measured 1.5e-7 (1.7 ulp)
  EXPECT_LT(trig_err, 1.2e-7);  // absolute on [-pi/4, pi/4]; measured 6.6e-8
}

}  // namespace
}  // namespace h3rt
