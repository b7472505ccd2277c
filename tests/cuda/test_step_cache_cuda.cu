// First-block step caching on the GPU forward session (h3rt/hybrid.h): a cache that is checked
// but never reused changes no bit, with CUDA graphs and without; reuses follow the cap, and the
// cached path (two graphs per step) gives the same bits as its eager launches; identical inputs
// reuse with a relative L1 of exactly 0.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "../cpu/test_util.h"
#include "../cpu/variant_files.h"
#include "cuda_test_util.h"
#include "h3rt/pipeline.h"

namespace h3rt {
namespace {

std::unique_ptr<Denoiser> gpu(bool graphs) {
  DenoiserOptions o;
  o.device = Device::cuda;
  o.cuda_graphs = graphs;
  return Denoiser::create(ModelSource{}, o);  // the tiny preset
}

SampleResult run(Denoiser& d, int steps, double threshold, int max_reuses = 3) {
  SampleOptions so;
  so.steps = steps;
  so.step_cache.threshold = threshold;
  so.step_cache.max_reuses = max_reuses;
  return sample(d, test::small_request(d.config()), so);
}

std::string decisions(const SampleResult& r) {
  std::string s;
  for (const HybridStep& h : r.hybrid_steps)
    s += !h.cache.checked ? '-' : h.cache.reused ? 'R' : 'C';
  return s;
}

void expect_same(const SampleResult& a, const SampleResult& b, const std::string& what) {
  test::expect_same_bits(a.video_latents, b.video_latents, what + " video_latents");
  test::expect_same_bits(a.audio_latents, b.audio_latents, what + " audio_latents");
}

TEST(StepCacheCuda, NeverReusedIsBitIdenticalToNoCache) {
  H3RT_REQUIRE_GPU();
  for (bool graphs : {false, true}) {
    auto d = gpu(graphs);
    const SampleResult plain = run(*d, 5, 0), checked = run(*d, 5, 1e-300);
    EXPECT_EQ(decisions(checked), "CCCCC");
    EXPECT_TRUE(std::isnan(checked.hybrid_steps[0].cache.rel_l1));
    for (int i = 1; i < 5; ++i) EXPECT_GT(checked.hybrid_steps[i].cache.rel_l1, 0) << i;
    expect_same(checked, plain, graphs ? "graphs" : "eager");
  }
}

TEST(StepCacheCuda, ReusesUpToTheCapSameBitsWithGraphs) {
  H3RT_REQUIRE_GPU();
  auto dg = gpu(true), de = gpu(false);
  const SampleResult g = run(*dg, 8, 1e9), e = run(*de, 8, 1e9);
  EXPECT_EQ(decisions(g), "CRRRCRRR");
  EXPECT_EQ(decisions(e), "CRRRCRRR");
  expect_same(g, e, "cached path, graphs vs eager");
  const SampleResult g2 = run(*dg, 8, 1e9);  // a second run on warm graphs: a fresh cache
  EXPECT_EQ(decisions(g2), "CRRRCRRR");
  expect_same(g2, g, "second run");
  const SampleResult plain = run(*dg, 8, 0);
  double diff = 0;
  for (size_t i = 0; i < plain.video_latents.size(); ++i)
    diff += std::fabs(plain.video_latents[i] - g.video_latents[i]);
  EXPECT_GT(diff, 0) << "reused steps must change the trajectory";
}

TEST(StepCacheCuda, IdenticalInputsReuseTheCachedStep) {
  H3RT_REQUIRE_GPU();
  auto d = gpu(true);
  const Request r = test::small_request(d->config());
  const TimestepPlan plan = make_timestep_plan(r.layout, 0.3f, 0.4f);
  StepCache cache({0.01, 5});
  ForwardInputs in{r.layout, plan, r.video_rows.data(), r.audio_rows.data(), r.text.data()};
  in.step_cache = &cache;
  const ForwardOutputs a = d->forward(in);
  EXPECT_FALSE(cache.last().reused);
  for (int k = 0; k < 3; ++k) {  // eager, capture, replay
    const ForwardOutputs b = d->forward(in);
    EXPECT_TRUE(cache.last().reused) << k;
    EXPECT_EQ(cache.last().rel_l1, 0.0) << k;
    double num = 0, den = 0;
    for (size_t i = 0; i < a.video_velocity.size(); ++i) {
      num += std::fabs(a.video_velocity[i] - b.video_velocity[i]);
      den += std::fabs(a.video_velocity[i]);
    }
    EXPECT_LT(num / den, 1e-3) << k;  // bf16(out0 + (final - out0)) vs final
  }
}

}  // namespace
}  // namespace h3rt
