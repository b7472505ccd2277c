// Device-memory forwards (ForwardInputs::device) and the strided copies the Python package uses
// around them: the kernel gives the host reference's bits; a device forward on a non-default
// stream (eager, then graph-captured and replayed) gives the host forward's bits, reads the rows
// the caller's stream wrote just before the call, and the host forwards after it still match;
// `bench step --device-io`'s timed call (the Python module's CUDA-latents path) gives them too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../cpu/golden_inputs.h"
#include "bench/device_io_forward.h"
#include "cuda_test_util.h"
#include "h3rt/device.h"
#include "h3rt/h3rt.h"
#include "h3rt/pipeline.h"
#include "h3rt/sampler.h"

namespace h3rt {
namespace {

std::vector<float> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  v[0] = std::numeric_limits<float>::infinity();
  v[1] = std::nanf("");
  v[2] = 1.0f + std::ldexp(1.0f, -8);
  return v;
}

// The same strided copy on the host and on the device: equal bits.
void expect_same_copy(DType src_t, DType dst_t, const Shape& view_shape,
                      Tensor (*view)(const Tensor&), const Shape& latent_shape) {
  const int64_t n = shape_numel(latent_shape);
  std::vector<float> f = random_values(n, 7);
  std::vector<uint16_t> b(n);
  for (int64_t i = 0; i < n; ++i) b[i] = f32_to_bf16(f[i]);
  void* hsrc = src_t == DType::f32 ? static_cast<void*>(f.data()) : b.data();
  const Tensor host_src(hsrc, src_t, latent_shape, nullptr, Device::cpu);
  std::vector<uint8_t> want(n * dtype_size(dst_t)), got(want.size());
  copy_strided(Tensor(want.data(), dst_t, view_shape, nullptr, Device::cpu), view(host_src));

  Tensor dsrc = cuda::device_empty(src_t, latent_shape),
         ddst = cuda::device_empty(dst_t, view_shape);
  H3RT_CUDA_CHECK(cudaMemcpy(dsrc.data(), hsrc, dsrc.nbytes(), cudaMemcpyHostToDevice));
  copy_strided(ddst, view(dsrc), 0);
  H3RT_CUDA_CHECK(cudaMemcpy(got.data(), ddst.data(), ddst.nbytes(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0)
      << dtype_name(src_t) << " -> " << dtype_name(dst_t);
}

TEST(DeviceForward, StridedCopyKernelMatchesHost) {
  H3RT_REQUIRE_GPU();
  const Shape lat{1, 24, 3, 6, 8}, rows{3, 3, 4, 24, 2, 2};
  const Shape audio{1, 32, 2, 9}, arows{2, 9, 32};
  for (DType s : {DType::f32, DType::bf16})
    for (DType d : {DType::f32, DType::bf16}) {
      expect_same_copy(s, d, rows, &video_rows_view, lat);
      expect_same_copy(s, d, arows, &comfy_audio_rows_view, audio);
    }
}

// Device rows and velocity buffers of the golden inputs.
struct DeviceRun {
  Tensor video, audio, video_v, audio_v;
  explicit DeviceRun(const test::GoldenInputs& g)
      : video(test::upload(g.video, DType::f32, {int64_t(g.video.size())})),
        audio(test::upload(g.audio, DType::f32, {int64_t(g.audio.size())})),
        video_v(test::device_buffer(DType::f32, {int64_t(g.video.size())})),
        audio_v(test::device_buffer(DType::f32, {int64_t(g.audio.size())})) {}
  DeviceIO io(cudaStream_t s) const {
    return {video.ptr<float>(), audio.ptr<float>(), video_v.ptr<float>(), audio_v.ptr<float>(),
            reinterpret_cast<uintptr_t>(s)};
  }
};

void expect_bits(const std::vector<float>& got, const FloatVec& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << what;
}

TEST(DeviceForward, BitIdenticalToHostForwardOnACallerStream) {
  H3RT_REQUIRE_GPU();
  const test::GoldenInputs& g = test::golden_inputs();
  DenoiserOptions o;
  o.device = Device::cuda;
  o.check_finite = CheckFinite::off;  // the waitless path (checks: the test below)
  auto d = Denoiser::create(ModelSource{test::golden_dir() + "/weights.safetensors"}, o);
  const ForwardOutputs want = d->forward(g.inputs());
  cudaStream_t s;
  H3RT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  DeviceRun run(g);
  const Tensor zeros = test::device_buffer(DType::f32, run.video.shape(), false);
  H3RT_CUDA_CHECK(cudaMemset(zeros.data(), 0, zeros.nbytes()));
  for (int step = 0; step < 4; ++step) {  // eager, capture, replays
    // The caller's stream writes the rows just before the call: the forward must see them.
    H3RT_CUDA_CHECK(cudaMemcpyAsync(run.video.data(), zeros.data(), zeros.nbytes(),
                                    cudaMemcpyDeviceToDevice, s));
    H3RT_CUDA_CHECK(cudaMemcpyAsync(run.video.data(), g.video.data(), run.video.nbytes(),
                                    cudaMemcpyHostToDevice, s));
    const DeviceIO io = run.io(s);
    ForwardInputs in = g.inputs();
    in.video_rows = in.audio_rows = nullptr;
    in.device = &io;
    const ForwardOutputs none = d->forward(in);
    EXPECT_TRUE(none.video_velocity.empty());
    std::vector<float> v(g.video.size()), a(g.audio.size());
    H3RT_CUDA_CHECK(cudaMemcpyAsync(v.data(), run.video_v.data(), run.video_v.nbytes(),
                                    cudaMemcpyDeviceToHost, s));
    H3RT_CUDA_CHECK(cudaMemcpyAsync(a.data(), run.audio_v.data(), run.audio_v.nbytes(),
                                    cudaMemcpyDeviceToHost, s));
    H3RT_CUDA_CHECK(cudaStreamSynchronize(s));  // the caller's stream only
    expect_bits(v, want.video_velocity, "video");
    expect_bits(a, want.audio_velocity, "audio");
  }
  const ForwardOutputs again = d->forward(g.inputs());  // a host forward after device ones
  expect_bits({again.video_velocity.begin(), again.video_velocity.end()}, want.video_velocity,
              "video (host after device)");
  H3RT_CUDA_CHECK(cudaStreamDestroy(s));
}

// The C API's device forward: the host forward's bits through h3rt_forward_device on a caller's
// non-default stream (eager, then captured and replayed), the rows written by that stream just
// before each call.
TEST(DeviceForward, CApiDeviceForwardGivesTheHostBits) {
  H3RT_REQUIRE_GPU();
  const test::GoldenInputs& g = test::golden_inputs();
  h3rt_model_options o;
  h3rt_model_options_init(&o);
  o.device = "cuda";
  o.check_finite = "off";
  h3rt_model* m = nullptr;
  const std::string w = test::golden_dir() + "/weights.safetensors";
  ASSERT_EQ(h3rt_model_create(w.c_str(), &o, &m), H3RT_OK) << h3rt_last_error();
  const SequenceLayout& L = g.layout;
  const h3rt_layout cl{L.text_len,           L.audio_len,           L.frames,
                       L.height,             L.width,               L.text_indices.data(),
                       L.audio_indices.data(), L.video_indices.data(), L.token_tags.data(),
                       L.position_ids.data()};
  const h3rt_timesteps ct{g.plan.timestep.data(), int64_t(g.plan.timestep.size()),
                          g.plan.timestep_indices.data(), 0, nullptr, 0};
  FloatVec wv(g.video.size()), wa(g.audio.size());
  ASSERT_EQ(h3rt_forward(m, &cl, &ct, g.video.data(), g.audio.data(), g.text.data(), wv.data(),
                         wa.data()),
            H3RT_OK)
      << h3rt_last_error();
  cudaStream_t s;
  H3RT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  DeviceRun run(g);
  H3RT_CUDA_CHECK(cudaMemsetAsync(run.video.data(), 0, run.video.nbytes(), s));
  for (int step = 0; step < 3; ++step) {
    H3RT_CUDA_CHECK(cudaMemcpyAsync(run.video.data(), g.video.data(), run.video.nbytes(),
                                    cudaMemcpyHostToDevice, s));
    ASSERT_EQ(h3rt_forward_device(m, &cl, &ct, run.video.ptr<float>(), run.audio.ptr<float>(),
                                  g.text.data(), run.video_v.ptr<float>(),
                                  run.audio_v.ptr<float>(), s),
              H3RT_OK)
        << h3rt_last_error();
    std::vector<float> v(g.video.size()), a(g.audio.size());
    H3RT_CUDA_CHECK(cudaMemcpyAsync(v.data(), run.video_v.data(), run.video_v.nbytes(),
                                    cudaMemcpyDeviceToHost, s));
    H3RT_CUDA_CHECK(cudaMemcpyAsync(a.data(), run.audio_v.data(), run.audio_v.nbytes(),
                                    cudaMemcpyDeviceToHost, s));
    H3RT_CUDA_CHECK(cudaStreamSynchronize(s));
    expect_bits(v, wv, "video");
    expect_bits(a, wa, "audio");
    H3RT_CUDA_CHECK(cudaMemsetAsync(run.video_v.data(), 0xff, run.video_v.nbytes(), s));
  }
  H3RT_CUDA_CHECK(cudaStreamDestroy(s));
  h3rt_model_free(m);
}

TEST(DeviceForward, ChecksNonFiniteRowsOnTheDevice) {
  H3RT_REQUIRE_GPU();
  const test::GoldenInputs& g = test::golden_inputs();
  DenoiserOptions o;
  o.device = Device::cuda;
  auto d = Denoiser::create(ModelSource{test::golden_dir() + "/weights.safetensors"}, o);
  std::vector<float> bad = g.video;
  bad[5] = std::nanf("");
  DeviceRun run(g);
  run.video = test::upload(bad, DType::f32, {int64_t(bad.size())});
  const DeviceIO io = run.io(nullptr);
  ForwardInputs in = g.inputs();
  in.video_rows = in.audio_rows = nullptr;
  in.device = &io;
  try {
    d->forward(in);
    FAIL() << "NaN rows passed the first-step check";
  } catch (const NonFinite& e) {
    EXPECT_NE(std::string(e.what()).find("packed input"), std::string::npos) << e.what();
  }
}

// A layout without audio rows on the GPU (host rows, eager, captured and replayed, then device
// rows with null audio buffers): the same bits every call, and as close to the CPU fp32 forward
// as the CPU bf16 forward is (mean within 2x, max within 3x, as the other forward tests).
TEST(DeviceForward, WithoutAudioRowsTracksTheCpuForward) {
  H3RT_REQUIRE_GPU();
  DenoiserOptions o;
  o.device = Device::cuda;
  auto gpu = Denoiser::create(ModelSource{}, o);  // the tiny preset, synthetic weights seed 0
  DenoiserOptions ob;
  ob.precision = Precision::bf16;
  auto cpu = Denoiser::create(ModelSource{}), cpu_bf16 = Denoiser::create(ModelSource{}, ob);
  const Request r = make_request(gpu->config(), RequestOptions{});
  const SequenceLayout& w = r.layout;
  const SequenceLayout l = make_t2va_layout(w.text_len, 0, w.frames, w.height, w.width);
  constexpr float kSigma = 0.7f;
  auto run = [&](Denoiser& d) {
    return forward_at_sigma(d, l, r.video_rows.data(), nullptr, r.text.data(), kSigma);
  };
  const ForwardOutputs ref = run(*cpu), bf = run(*cpu_bf16), first = run(*gpu);
  EXPECT_TRUE(first.audio_velocity.empty());
  const std::vector<double> rd(ref.video_velocity.begin(), ref.video_velocity.end());
  const test::Err g = test::error(first.video_velocity, rd), c = test::error(bf.video_velocity, rd);
  std::printf("no audio rows: gpu max/mean %.4g/%.4g, cpu bf16 %.4g/%.4g\n", g.max_abs, g.mean_abs,
              c.max_abs, c.mean_abs);
  EXPECT_GT(c.mean_abs, 0.0);
  EXPECT_LE(g.mean_abs, 2.0 * c.mean_abs);
  EXPECT_LE(g.max_abs, 3.0 * c.max_abs);
  for (int call = 0; call < 3; ++call) {  // captured, replayed
    const ForwardOutputs again = run(*gpu);
    test::expect_same_bits(again.video_velocity, first.video_velocity, "host rows, again");
  }
  const std::vector<float> rows(r.video_rows.begin(), r.video_rows.end());
  const Tensor video = test::upload(rows, DType::f32, {int64_t(rows.size())});
  const Tensor vel = test::device_buffer(DType::f32, video.shape());
  const DeviceIO io{video.ptr<float>(), nullptr, vel.ptr<float>(), nullptr, 0};
  const TimestepPlan plan =
      make_timestep_plan(l, 1.0f - kSigma, 1.0f - audio_sigma_from_video(kSigma));
  ForwardInputs in{l, plan, nullptr, nullptr, r.text.data()};
  in.device = &io;
  for (int call = 0; call < 2; ++call) {
    H3RT_CUDA_CHECK(cudaMemset(vel.data(), 0xff, vel.nbytes()));
    gpu->forward(in);
    std::vector<float> v(vel.numel());
    H3RT_CUDA_CHECK(cudaMemcpy(v.data(), vel.data(), vel.nbytes(), cudaMemcpyDeviceToHost));
    expect_bits(v, first.video_velocity, "device rows");
  }
}

// The host velocity rows of `v` as ComfyUI-layout latents (the host strided copy, the reference
// of the device one): video [1, C, T, H, W] then audio [1, Ca, 2, N], concatenated.
std::vector<float> host_latents(const H3Config& c, const SequenceLayout& l, ForwardOutputs& v) {
  const int64_t nv = c.in_channels * l.frames * l.height * l.width;
  std::vector<float> out(nv + 2 * l.audio_len * c.audio_channels);
  const Tensor video(out.data(), DType::f32, {1, c.in_channels, l.frames, l.height, l.width},
                     nullptr, Device::cpu),
      audio(out.data() + nv, DType::f32, {1, c.audio_channels, 2, l.audio_len}, nullptr,
            Device::cpu);
  const Tensor vrows(v.video_velocity.data(), DType::f32,
                     {l.frames, l.height / 2, l.width / 2, c.in_channels, 2, 2}, nullptr,
                     Device::cpu),
      arows(v.audio_velocity.data(), DType::f32, {2, l.audio_len, c.audio_channels}, nullptr,
            Device::cpu);
  copy_strided(video_rows_view(video), vrows);
  copy_strided(comfy_audio_rows_view(audio), arows);
  return out;
}

// forward_device_latents (what the Python module runs and bench step --device-io times): on the
// tiny preset (as Python's h3rt.preset("tiny", device="cuda")) its output latents are the host
// forward's velocities (forward_request on host rows, unpatchified on the host) bit for bit, on
// a caller's stream, eager, captured and replayed, the outputs poisoned before each call.
TEST(DeviceForward, BenchDeviceIoForwardGivesTheHostBits) {
  H3RT_REQUIRE_GPU();
  DenoiserOptions o;
  o.device = Device::cuda;
  auto d = Denoiser::create(ModelSource{}, o);  // the tiny preset, synthetic weights seed 0
  const H3Config& c = d->config();
  const Request r = make_request(c, RequestOptions{});
  constexpr float kSigma = 0.7f;
  ForwardOutputs host = forward_request(*d, r, kSigma);
  const std::vector<float> want = host_latents(c, r.layout, host);
  cudaStream_t s;
  H3RT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const auto su = reinterpret_cast<uintptr_t>(s);
  {  // the latents are freed on `s`, before it goes
    const bench::DeviceLatents in = bench::upload_latents(c, r, su);
    const bench::DeviceLatents out = bench::device_latents(c, r.layout, su);
    const int64_t nv = out.video.numel();
    for (int call = 0; call < 4; ++call) {  // eager, capture, replays
      H3RT_CUDA_CHECK(cudaMemsetAsync(out.video.data(), 0xff, out.video.nbytes(), s));
      H3RT_CUDA_CHECK(cudaMemsetAsync(out.audio.data(), 0xff, out.audio.nbytes(), s));
      forward_device_latents(*d, r, kSigma, in.video, in.audio, out.video, out.audio, su);
      std::vector<float> got(want.size());
      H3RT_CUDA_CHECK(cudaMemcpyAsync(got.data(), out.video.data(), out.video.nbytes(),
                                      cudaMemcpyDeviceToHost, s));
      H3RT_CUDA_CHECK(cudaMemcpyAsync(got.data() + nv, out.audio.data(), out.audio.nbytes(),
                                      cudaMemcpyDeviceToHost, s));
      H3RT_CUDA_CHECK(cudaStreamSynchronize(s));
      EXPECT_EQ(std::memcmp(got.data(), want.data(), nv * 4), 0) << "video, call " << call;
      EXPECT_EQ(std::memcmp(got.data() + nv, want.data() + nv, (want.size() - nv) * 4), 0)
          << "audio, call " << call;
    }
  }
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));
  H3RT_CUDA_CHECK(cudaStreamDestroy(s));
}

}  // namespace
}  // namespace h3rt
