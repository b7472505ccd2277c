// copy_strided and the latent views (h3rt/device.h) on the host: patchify/unpatchify and
// ComfyUI's audio axis swap as strided copies give the same bits as the existing host code
// (patchify_video, unpatchify_video, audio_latents_to_rows over the swapped axes); bf16 both
// ways as h3rt/formats.h rounds. The GPU kernel is tested against this (tests/cuda).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "h3rt/device.h"
#include "h3rt/formats.h"
#include "h3rt/layout.h"
#include "h3rt/pipeline.h"

namespace h3rt {
namespace {

FloatVec random_values(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  FloatVec v(n);
  for (float& x : v) x = d(g);
  return v;
}

Tensor host(FloatVec& v, Shape shape) {
  return Tensor(v.data(), DType::f32, std::move(shape), nullptr, Device::cpu);
}

constexpr int64_t C = 3, T = 2, H = 4, W = 6, N = 5;

TEST(StridedCopy, VideoViewIsPatchify) {
  FloatVec lat = random_values(C * T * H * W, 1);
  FloatVec rows(lat.size());
  copy_strided(host(rows, {T, H / 2, W / 2, C, 2, 2}), video_rows_view(host(lat, {1, C, T, H, W})));
  const FloatVec want = patchify_video(lat.data(), C, T, H, W);
  EXPECT_EQ(std::memcmp(rows.data(), want.data(), rows.size() * 4), 0);

  FloatVec back(lat.size());
  copy_strided(video_rows_view(host(back, {1, C, T, H, W})),
               host(rows, {T, H / 2, W / 2, C, 2, 2}));
  const FloatVec unpatched = unpatchify_video(rows.data(), C, T, H, W);
  EXPECT_EQ(std::memcmp(back.data(), unpatched.data(), back.size() * 4), 0);
  EXPECT_EQ(std::memcmp(back.data(), lat.data(), back.size() * 4), 0);
}

// A non-contiguous source (every other column of a wider tensor): the view composes its strides.
TEST(StridedCopy, StridedVideoSource) {
  FloatVec wide = random_values(C * T * H * W * 2, 2);
  const Tensor src(wide.data(), DType::f32, {1, C, T, H, W},
                   {C * T * H * W * 2, T * H * W * 2, H * W * 2, W * 2, 2}, nullptr, Device::cpu);
  FloatVec dense(C * T * H * W);
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = wide[2 * i];
  FloatVec rows(dense.size());
  copy_strided(host(rows, {T, H / 2, W / 2, C, 2, 2}), video_rows_view(src));
  const FloatVec want = patchify_video(dense.data(), C, T, H, W);
  EXPECT_EQ(std::memcmp(rows.data(), want.data(), rows.size() * 4), 0);
}

TEST(StridedCopy, ComfyAudioViewIsRows) {
  FloatVec comfy = random_values(C * 2 * N, 3);  // [1, C, 2, N]
  FloatVec latent(comfy.size());                 // h3rt's [2, C, N]
  for (int64_t c = 0; c < C; ++c)
    for (int64_t ch = 0; ch < 2; ++ch)
      for (int64_t j = 0; j < N; ++j) latent[(ch * C + c) * N + j] = comfy[(c * 2 + ch) * N + j];
  FloatVec rows(comfy.size());
  copy_strided(host(rows, {2, N, C}), comfy_audio_rows_view(host(comfy, {1, C, 2, N})));
  const FloatVec want = audio_latents_to_rows(latent.data(), C, N);
  EXPECT_EQ(std::memcmp(rows.data(), want.data(), rows.size() * 4), 0);
  FloatVec back(comfy.size());
  copy_strided(comfy_audio_rows_view(host(back, {1, C, 2, N})), host(rows, {2, N, C}));
  EXPECT_EQ(std::memcmp(back.data(), comfy.data(), back.size() * 4), 0);
}

TEST(StridedCopy, Bf16BothWays) {
  FloatVec f = random_values(64, 4);
  f[0] = std::numeric_limits<float>::infinity();
  f[1] = std::nanf("");
  f[2] = 1.0f + std::ldexp(1.0f, -8);  // a tie: rounds to even
  std::vector<uint16_t> b(f.size());
  copy_strided(Tensor(b.data(), DType::bf16, {64}, nullptr, Device::cpu), host(f, {64}));
  for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(b[i], f32_to_bf16(f[i])) << i;
  FloatVec up(f.size());
  copy_strided(host(up, {64}), Tensor(b.data(), DType::bf16, {64}, nullptr, Device::cpu));
  for (size_t i = 0; i < f.size(); ++i) {  // exact: the bf16 bits in the high half
    uint32_t bits = 0;
    std::memcpy(&bits, &up[i], 4);
    ASSERT_EQ(bits, uint32_t(b[i]) << 16) << i;
  }
}

TEST(StridedCopy, RefusesMismatches) {
  FloatVec a(6), b(6);
  EXPECT_THROW(copy_strided(host(a, {2, 3}), host(b, {3, 2})), Error);
  std::vector<int64_t> i(6);
  EXPECT_THROW(copy_strided(host(a, {6}), Tensor(i.data(), DType::i64, {6}, nullptr, Device::cpu)),
               Error);
  EXPECT_THROW(video_rows_view(host(a, {1, 1, 1, 2, 3})), Error);  // odd width
}

// A device forward on the CPU denoiser: refused with a clear error, nothing read.
TEST(StridedCopy, CpuDenoiserRefusesDeviceRows) {
  auto d = Denoiser::create(ModelSource{});
  const SequenceLayout l = make_t2va_layout(2, 2, 1, 2, 2);
  const TimestepPlan p = make_timestep_plan(l, 0.5f, 0.5f);
  const DeviceIO io{};
  ForwardInputs in{l, p};
  in.device = &io;
  try {
    d->forward(in);
    FAIL() << "a CPU model ran a device forward";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA device memory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace h3rt
