// sample() with its state in device memory (SampleOptions::device_loop, pipeline/device_loop.h)
// against the same run with the state on the host, on the CUDA tiny preset: every sampler of
// both loops, resumed runs, the hybrid and step caching, and the runs that keep their state on the
// host.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>

#include "../cpu/test_util.h"
#include "../cpu/variant_files.h"
#include "cuda/runtime.h"
#include "cuda_test_util.h"
#include "h3rt/pipeline.h"

namespace h3rt {
namespace {

std::unique_ptr<Denoiser> cuda_tiny() {
  DenoiserOptions o;
  o.device = Device::cuda;
  return Denoiser::create(ModelSource{}, o);
}

void expect_same_run(const SampleResult& got, const SampleResult& want, const std::string& what) {
  test::expect_same_bits(got.video_latents, want.video_latents, what + " video");
  test::expect_same_bits(got.audio_latents, want.audio_latents, what + " audio");
}

TEST(DeviceLoop, EverySamplerMatchesTheHostLoop) {
  H3RT_REQUIRE_GPU();
  auto d = cuda_tiny();
  const Request r = test::small_request(d->config());
  struct Case {
    Scheduler sch;
    SamplerKind k;
  };
  for (const Case& c :
       {Case{Scheduler::diffusers, SamplerKind::euler}, Case{Scheduler::simple, SamplerKind::euler},
        Case{Scheduler::simple, SamplerKind::res_multistep},
        Case{Scheduler::simple, SamplerKind::euler_ancestral}}) {
    SampleOptions so;
    so.steps = 4;
    so.scheduler = c.sch;
    so.sampler = c.k;
    so.audio_shift = 3.0;  // != the video shift: the carried audio's conversions run
    const std::string what = std::string(scheduler_name(c.sch)) + "/" + sampler_name(c.k);
    const SampleResult dev = sample(*d, r, so);
    so.device_loop = false;
    const SampleResult host = sample(*d, r, so);
    EXPECT_TRUE(dev.device_loop) << what;
    EXPECT_FALSE(host.device_loop) << what;
    expect_same_run(dev, host, what);
  }
}

TEST(DeviceLoop, CancelledAndResumedRunMatchesTheWholeRun) {
  H3RT_REQUIRE_GPU();
  auto d = cuda_tiny();
  const Request r = test::small_request(d->config());
  const std::string path =
      (std::filesystem::temp_directory_path() / "h3rt_device_loop_resume.h3rs").string();
  SampleOptions so;
  so.steps = 5;
  so.scheduler = Scheduler::simple;
  so.sampler = SamplerKind::res_multistep;  // a multistep state crosses the resume
  const SampleResult whole = sample(*d, r, so);
  SampleOptions first = so;
  first.checkpoint_path = path;
  first.progress = [](int done, int, double) { return done < 3; };
  EXPECT_THROW(sample(*d, r, first), Cancelled);
  SampleOptions rest = so;
  rest.resume_path = path;
  const SampleResult resumed = sample(*d, r, rest);
  EXPECT_TRUE(resumed.device_loop);
  EXPECT_EQ(resumed.resumed_steps, 3);
  expect_same_run(resumed, whole, "resumed after 3 of 5 steps");
  std::filesystem::remove(path);
}

// Sparse steps with the online check, and first-block step caching: the same decisions and
// bits with the state on the device.
TEST(DeviceLoop, HybridAndStepCacheMatchTheHostLoop) {
  H3RT_REQUIRE_GPU();
  const int cc = cuda::current_device_cc();
  if (cc != 90 && cc != 120 && cc != 121) GTEST_SKIP() << "Sage kernels run on sm_90 / sm_12x";
  DenoiserOptions o;
  o.device = Device::cuda;
  o.attention = Attention::sage;
  auto d = Denoiser::create(ModelSource{}, o);
  RequestOptions ro;
  ro.width = 384;
  ro.height = 256;
  const Request r = make_request(d->config(), ro);
  SampleOptions so;
  so.steps = 5;
  so.hybrid.sparse.tau = 0.5f;
  so.hybrid.sparse.dense_blocks = 0;
  so.hybrid.dense_steps = 1;
  so.hybrid.check.every = 2;
  so.step_cache.threshold = 1e9;  // reuse whenever allowed
  so.step_cache.max_reuses = 1;
  const SampleResult dev = sample(*d, r, so);
  so.device_loop = false;
  const SampleResult host = sample(*d, r, so);
  EXPECT_TRUE(dev.device_loop);
  expect_same_run(dev, host, "hybrid + step cache");
  ASSERT_EQ(dev.hybrid_steps.size(), host.hybrid_steps.size());
  for (size_t i = 0; i < dev.hybrid_steps.size(); ++i) {
    const HybridStep &a = dev.hybrid_steps[i], &b = host.hybrid_steps[i];
    EXPECT_EQ(a.sparse, b.sparse) << i;
    EXPECT_EQ(a.cache.checked, b.cache.checked) << i;
    EXPECT_EQ(a.cache.reused, b.cache.reused) << i;
    EXPECT_EQ(a.check.checked, b.check.checked) << i;
    if (!std::isnan(b.sparse_fraction)) EXPECT_EQ(a.sparse_fraction, b.sparse_fraction) << i;
  }
}

TEST(DeviceLoop, MaskedRunsKeepTheirStateOnTheHost) {
  H3RT_REQUIRE_GPU();
  auto d = cuda_tiny();
  Request r = test::small_request(d->config());
  const SequenceLayout& L = r.layout;
  Conditioning k;
  k.video_mask.assign(L.frames * L.height * L.width, 1.0f);
  condition_request(r, d->config(), k);
  SampleOptions so;
  so.steps = 2;
  so.scheduler = Scheduler::simple;
  EXPECT_FALSE(sample(*d, r, so).device_loop);
}

}  // namespace
}  // namespace h3rt
