// The hybrid policy (which steps and blocks get sparse attention), what the sampling loop hands
// each forward, and first-block step caching on the CPU forward (tiny preset).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "h3rt/hybrid.h"
#include "h3rt/pipeline.h"
#include "test_util.h"
#include "variant_files.h"

namespace h3rt {
namespace {

TEST(HybridPolicy, DenseStepsThenSparse) {
  HybridOptions h;
  h.dense_steps = 3;
  for (int i = 0; i < 8; ++i) EXPECT_FALSE(sparse_step(h, i)) << "tau 0 is off, step " << i;
  h.sparse.tau = 1.0f;
  for (int i = 0; i < 8; ++i) EXPECT_EQ(sparse_step(h, i), i >= 3) << "step " << i;
  h.dense_steps = 0;
  EXPECT_TRUE(sparse_step(h, 0));
  h.dense_steps = 100;
  EXPECT_FALSE(sparse_step(h, 99));
  EXPECT_TRUE(sparse_step(h, 100));
}

TEST(HybridPolicy, DenseBlocks) {
  SparseAttention s;
  s.tau = 1.0f;
  EXPECT_EQ(s.dense_blocks, 2);  // the defaults of the brief: 2 dense blocks, video rows only
  EXPECT_TRUE(s.video_rows_only);
  EXPECT_FALSE(sparse_block(s, 0));
  EXPECT_FALSE(sparse_block(s, 1));
  EXPECT_TRUE(sparse_block(s, 2));
  s.tau = 0;
  EXPECT_FALSE(sparse_block(s, 5));
  EXPECT_EQ(HybridOptions{}.dense_steps, 10);
}

TEST(HybridPolicy, ReuseDecision) {
  StepCacheOptions o;
  EXPECT_FALSE(reuse_cached_step(o, true, 0.0, 0)) << "threshold 0 is off";
  o.threshold = 0.08;
  EXPECT_TRUE(reuse_cached_step(o, true, 0.079, 0));
  EXPECT_FALSE(reuse_cached_step(o, true, 0.08, 0)) << "strictly below";
  EXPECT_FALSE(reuse_cached_step(o, false, 0.0, 0)) << "nothing cached";
  EXPECT_FALSE(reuse_cached_step(o, true, NAN, 0));
  EXPECT_TRUE(reuse_cached_step(o, true, 0.0, 2));
  EXPECT_FALSE(reuse_cached_step(o, true, 0.0, 3)) << "the cap of 3 reuses in a row";
}

TEST(HybridPolicy, OptionChecksNameTheField) {
  const auto msg = [](HybridOptions h, StepCacheOptions c) {
    return test::error_of([&] { check_hybrid_options(h, c); });
  };
  HybridOptions h;
  StepCacheOptions c;
  EXPECT_EQ(msg(h, c), "");
  h.dense_steps = -1;
  EXPECT_NE(msg(h, c).find("dense_steps must be >= 0, got -1"), std::string::npos);
  h = {};
  h.sparse.tau = -2;
  EXPECT_NE(msg(h, c).find("tau must be finite and >= 0"), std::string::npos);
  h = {};
  c.max_reuses = 0;
  EXPECT_NE(msg(h, c).find("max_reuses must be >= 1, got 0"), std::string::npos);
  c = {};
  c.threshold = INFINITY;
  EXPECT_NE(msg(h, c).find("threshold must be finite"), std::string::npos);
}

TEST(HybridPolicy, SettingsMapOnceAndErrorsUseTheCallersNames) {
  const HybridPolicy p = hybrid_policy({1.5, 4, 3, 0.25, 2});
  EXPECT_EQ(p.hybrid.sparse.tau, 1.5f);
  EXPECT_EQ(p.hybrid.dense_steps, 4);
  EXPECT_EQ(p.hybrid.sparse.dense_blocks, 3);
  EXPECT_EQ(p.step_cache.threshold, 0.25);
  EXPECT_EQ(p.step_cache.max_reuses, 2);
  const HybridPolicy off = hybrid_policy({});
  EXPECT_FALSE(off.hybrid.sparse.enabled());
  EXPECT_FALSE(off.step_cache.enabled());
  const auto msg = [](const HybridSettings& s, const HybridNames& n) {
    return test::error_of([&] { hybrid_policy(s, n); });
  };
  HybridSettings s;
  s.sparse_attention = 11;
  EXPECT_NE(msg(s, kHybridFieldNames).find("sparse_attention must be in [0, 10]"),
            std::string::npos);
  EXPECT_NE(msg(s, kHybridFlagNames).find("--sparse-attention must be in [0, 10]"),
            std::string::npos);
  s = {};
  s.dense_blocks = 1001;
  EXPECT_NE(msg(s, kHybridFieldNames).find("dense_blocks must be in [0, 1000], got 1001"),
            std::string::npos);
  s = {};
  s.step_cache = NAN;
  EXPECT_NE(msg(s, kHybridFlagNames).find("--step-cache must be in [0, 100]"), std::string::npos);
  s = {};
  s.step_cache_max = 0;
  EXPECT_NE(msg(s, kHybridFieldNames).find("step_cache_max must be in [1, 1000], got 0"),
            std::string::npos);
}

// A CPU denoiser that records what each forward was given and reports fake sparse stats.
class RecordingDenoiser : public Denoiser {
 public:
  RecordingDenoiser() : inner_(Denoiser::create(ModelSource{})) {}
  const H3Config& config() const override { return inner_->config(); }
  std::string device_name() const override { return "recording cpu"; }
  Precision precision() const override { return inner_->precision(); }
  ForwardOutputs forward(const ForwardInputs& in) override {
    sparse.push_back(in.sparse ? in.sparse->tau : 0.0f);
    cache_given.push_back(in.step_cache != nullptr);
    if (in.sparse && in.sparse_stats) {
      in.sparse_stats->key_blocks_total += 8;
      in.sparse_stats->key_blocks_computed += in.step;  // a fraction that names the step
    }
    return inner_->forward(in);
  }
  std::vector<float> sparse;
  std::vector<bool> cache_given;

 private:
  std::unique_ptr<Denoiser> inner_;
};

TEST(HybridSample, EachForwardGetsThePolicysSparseSettings) {
  RecordingDenoiser d;
  const Request r = test::small_request(d.config());
  SampleOptions o;
  o.steps = 5;
  o.hybrid.sparse.tau = 1.5f;
  o.hybrid.dense_steps = 2;
  const SampleResult res = sample(d, r, o);
  EXPECT_EQ(d.sparse, (std::vector<float>{0, 0, 1.5f, 1.5f, 1.5f}));
  EXPECT_EQ(d.cache_given, std::vector<bool>(5, false));
  ASSERT_EQ(res.hybrid_steps.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    const HybridStep& s = res.hybrid_steps[i];
    EXPECT_EQ(s.sparse, i >= 2) << i;
    if (i >= 2)
      EXPECT_DOUBLE_EQ(s.sparse_fraction, i / 8.0) << i;
    else
      EXPECT_TRUE(std::isnan(s.sparse_fraction)) << i;
    EXPECT_FALSE(s.cache.checked);
  }
  o.hybrid.sparse.tau = 0;  // off: no forward gets sparse settings
  d.sparse.clear();
  sample(d, r, o);
  EXPECT_EQ(d.sparse, std::vector<float>(5, 0.0f));
}

SampleResult run(Denoiser& d, int steps, double threshold, int max_reuses = 3) {
  const Request r = test::small_request(d.config());
  SampleOptions o;
  o.steps = steps;
  o.step_cache.threshold = threshold;
  o.step_cache.max_reuses = max_reuses;
  return sample(d, r, o);
}

std::string decisions(const SampleResult& r) {
  std::string s;
  for (const HybridStep& h : r.hybrid_steps)
    s += !h.cache.checked ? '-' : h.cache.reused ? 'R' : 'C';
  return s;
}

TEST(StepCache, ThresholdZeroAndNeverReusedAreBitIdenticalToNoCache) {
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(p == Precision::bf16 ? "bf16" : "fp32");
    DenoiserOptions o;
    o.precision = p;
    auto d = Denoiser::create(ModelSource{}, o);
    const SampleResult plain = run(*d, 4, 0);
    EXPECT_EQ(decisions(plain), "----");
    // A threshold no step can pass: the cache is checked and refreshed every step, which must
    // not change a bit of the trajectory.
    const SampleResult checked = run(*d, 4, 1e-300);
    EXPECT_EQ(decisions(checked), "CCCC");
    EXPECT_TRUE(std::isnan(checked.hybrid_steps[0].cache.rel_l1));
    for (int i = 1; i < 4; ++i) EXPECT_GT(checked.hybrid_steps[i].cache.rel_l1, 0) << i;
    test::expect_same_bits(checked.video_latents, plain.video_latents, "video");
    test::expect_same_bits(checked.audio_latents, plain.audio_latents, "audio");
  }
}

TEST(StepCache, HugeThresholdReusesUpToTheCap) {
  auto d = Denoiser::create(ModelSource{});
  EXPECT_EQ(decisions(run(*d, 8, 1e9)), "CRRRCRRR");  // the default cap, 3
  const SampleResult reused = run(*d, 3, 1e9, 1), plain = run(*d, 3, 0);
  EXPECT_EQ(decisions(reused), "CRC");
  double diff = 0;
  for (size_t i = 0; i < plain.video_latents.size(); ++i)
    diff += std::fabs(reused.video_latents[i] - plain.video_latents[i]);
  EXPECT_GT(diff, 0) << "reused steps skip block 1: the latents must move";
}

// The decisions of a run follow the rule on the relative L1 each step measured, and each
// measured value equals block 0's residual change recomputed here from the forward's probes
// (the residual of the last step that computed every block is the reference).
TEST(StepCache, DecisionSequenceOfAKnownRun) {
  const H3Model m = make_synthetic_model(H3Config::tiny(), 0);
  const Request r = test::small_request(m.config);
  const SamplerPlan plan = make_sampler_plan(r.layout, 9, kVideoShift, kAudioShift);
  StepCache cache({0.5, 2});
  std::vector<float> ref_residual;
  std::string seq;
  FloatVec video = r.video_rows;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    FloatVec packed, out0;
    const Probe probe = [&](const std::string& name, const float* data, const Shape& shape) {
      if (name == "packed_input") packed.assign(data, data + shape_numel(shape));
      if (name == "block0_out") out0.assign(data, data + shape_numel(shape));
    };
    ForwardInputs in{r.layout, plan.steps[i].plan, video.data(), r.audio_rows.data(),
                     r.text.data()};
    in.step_cache = &cache;
    const int reuses_before = cache.consecutive_reuses();
    const ForwardOutputs v = forward_cpu(m, in, Precision::fp32, &probe);
    const StepCache::Decision dec = cache.last();
    ASSERT_TRUE(dec.checked);
    std::vector<float> res(packed.size());
    for (size_t k = 0; k < res.size(); ++k) res[k] = out0[k] - packed[k];
    if (ref_residual.empty()) {
      EXPECT_TRUE(std::isnan(dec.rel_l1));
    } else {
      double num = 0, den = 0;
      for (size_t k = 0; k < res.size(); ++k) {
        num += std::fabs(double(res[k]) - ref_residual[k]);
        den += std::fabs(double(ref_residual[k]));
      }
      EXPECT_NEAR(dec.rel_l1, num / den, 1e-12 * (num / den)) << "step " << i;
      EXPECT_EQ(dec.reused, num / den < 0.5 && reuses_before < 2) << "step " << i;
    }
    if (!dec.reused) ref_residual = res;
    seq += dec.reused ? 'R' : 'C';
    // Move the latents along the trajectory (Euler, x0 = x + sigma v) for the next step.
    const float dt = plan.steps[i].sigma_video - plan.steps[i].sigma_video_next;
    for (size_t k = 0; k < video.size(); ++k) video[k] += dt * v.video_velocity[k];
  }
  EXPECT_EQ(seq.size(), plan.steps.size());
  EXPECT_NE(seq.find('C', 1), std::string::npos) << seq;  // both kinds occur on this run
  EXPECT_NE(seq.find('R'), std::string::npos) << seq;
}

// Identical inputs twice: relative L1 0, a reuse, and the same velocities as the computed
// forward up to the float32 rounding of out0 + (final - out0).
TEST(StepCache, ReuseOfIdenticalInputsGivesTheCachedResult) {
  const H3Model m = make_synthetic_model(H3Config::tiny(), 0);
  const Request r = test::small_request(m.config);
  const TimestepPlan plan = make_timestep_plan(r.layout, 0.3f, 0.4f);
  StepCache cache({0.01, 3});
  ForwardInputs in{r.layout, plan, r.video_rows.data(), r.audio_rows.data(), r.text.data()};
  in.step_cache = &cache;
  const ForwardOutputs a = forward_cpu(m, in, Precision::fp32);
  EXPECT_FALSE(cache.last().reused);
  const ForwardOutputs b = forward_cpu(m, in, Precision::fp32);
  EXPECT_TRUE(cache.last().reused);
  EXPECT_EQ(cache.last().rel_l1, 0.0);
  ASSERT_EQ(a.video_velocity.size(), b.video_velocity.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.video_velocity.size(); ++i) {
    num += std::fabs(a.video_velocity[i] - b.video_velocity[i]);
    den += std::fabs(a.video_velocity[i]);
  }
  EXPECT_LT(num / den, 1e-5);
  cache.reset();
  forward_cpu(m, in, Precision::fp32);
  EXPECT_FALSE(cache.last().reused) << "a reset cache holds no step";
}

}  // namespace
}  // namespace h3rt
