// PDD head banks: the span of heads a step consumes and their weights on real schedules (edge
// cases included), the effective head against a direct computation, the forward with a bank,
// the error without a schedule, and the VSA gate keys the loader accepts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "golden_inputs.h"
#include "h3rt/model.h"
#include "h3rt/pipeline.h"
#include "h3rt/safetensors.h"
#include "h3rt/sampler.h"
#include "model/pdd_head.h"
#include "test_util.h"
#include "variant_files.h"

namespace h3rt {
namespace {

namespace fs = std::filesystem;

// One folder per test process (ctest runs tests in parallel processes, and two of them writing
// the same file name raced in the atomic writer's rename), removed when the process exits.
std::string tmp(const std::string& name) {
  static const test::TempDir dir("h3rt_pdd_tests");
  return dir.file(name);
}

SigmaSchedule schedule(int steps, int step) {
  const std::vector<float> s = sigma_grid(steps + 1, kVideoShift);
  return {s.at(step), s};
}

// The dt weights of heads [start, stop) in plain double arithmetic.
std::vector<double> direct_weights(int64_t n, int64_t start, int64_t stop, double f) {
  auto v = [&](int64_t j) {
    const double g = 1.0 - double(j) / double(n);
    return 1.0 - f * g / (1.0 + (f - 1.0) * g);
  };
  std::vector<double> w;
  double sum = 0;
  for (int64_t j = start; j < stop; ++j) sum += v(j + 1) - v(j);
  for (int64_t j = start; j < stop; ++j) w.push_back((v(j + 1) - v(j)) / sum);
  return w;
}

TEST(PddHead, SpansOnRealSchedules) {
  // n = 4 heads, 10 steps: (1 - base(sigma_i)) * 4 = 0.4 i, so start, stop = round(0.4 i),
  // round(0.4 (i + 1)); a span of zero width takes one head (stop = start + 1), and the last
  // start clamps to n - 1 = 3.
  const std::vector<std::pair<int64_t, int64_t>> want10 = {
      {0, 1}, {0, 1}, {1, 2}, {1, 2}, {2, 3}, {2, 3}, {2, 3}, {3, 4}, {3, 4}, {3, 4}, {3, 4}};
  for (int i = 0; i <= 10; ++i) {  // i = 10 is the terminal sigma 0 (next = itself)
    const model::PddSpan s = model::pdd_span(4, schedule(10, i));
    EXPECT_EQ(s.start, want10[i].first) << "step " << i;
    EXPECT_EQ(s.stop, want10[i].second) << "step " << i;
  }
  // n = 4, 2 steps: [0, 2) then [2, 4). n = 8, 3 steps: [0, 3), [3, 5), [5, 8).
  EXPECT_EQ(model::pdd_span(4, schedule(2, 0)).stop, 2);
  EXPECT_EQ(model::pdd_span(4, schedule(2, 1)).start, 2);
  EXPECT_EQ(model::pdd_span(4, schedule(2, 1)).stop, 4);
  const std::vector<std::pair<int64_t, int64_t>> want8 = {{0, 3}, {3, 5}, {5, 8}};
  for (int i = 0; i < 3; ++i) {
    const model::PddSpan s = model::pdd_span(8, schedule(3, i));
    EXPECT_EQ(s.start, want8[i].first) << "step " << i;
    EXPECT_EQ(s.stop, want8[i].second) << "step " << i;
  }
  // A sigma off the grid takes the nearest grid sigma's interval.
  SigmaSchedule off = schedule(10, 3);
  off.sigma = 0.6f * off.sample_sigmas[3] + 0.4f * off.sample_sigmas[4];
  EXPECT_EQ(model::pdd_span(4, off).start, 1);
}

TEST(PddHead, WeightsAreTheNormalizedShiftedDt) {
  for (const auto& [n, start, stop] :
       {std::tuple<int64_t, int64_t, int64_t>{4, 0, 2}, {4, 2, 4}, {8, 3, 5}, {8, 5, 8}, {4, 3, 4}})
    for (double f : {12.0, 3.0}) {
      const std::vector<float> w = model::pdd_weights(n, {start, stop}, f);
      const std::vector<double> d = direct_weights(n, start, stop, f);
      ASSERT_EQ(w.size(), d.size());
      for (size_t j = 0; j < d.size(); ++j)
        EXPECT_NEAR(w[j], d[j], 1e-7) << "n " << n << " [" << start << ", " << stop << ") f " << f;
    }
}

TEST(PddHead, EffectiveHeadIsHeadZeroPlusWeightedOffsets) {
  const int64_t n = 4, out = 3, in = 5;
  LinearWeight bank;
  bank.name = "final_layer.video_out";
  bank.out = n * out;
  bank.in = in;
  for (int64_t i = 0; i < bank.out * in; ++i) bank.w.push_back(std::sin(0.3f * float(i)));
  for (int64_t i = 0; i < bank.out; ++i) bank.b.push_back(std::cos(0.7f * float(i)));
  for (const model::PddSpan span :
       {model::PddSpan{0, 1}, model::PddSpan{0, 2}, model::PddSpan{1, 3}, model::PddSpan{2, 4}}) {
    const std::vector<float> w = model::pdd_weights(n, span, 12.0);
    const LinearWeight h = model::pdd_effective_head(bank, n, span, w);
    ASSERT_EQ(h.out, out);
    ASSERT_EQ(h.in, in);
    auto direct = [&](const FloatVec& src, int64_t block, int64_t e) {
      double v = src[e];  // head 0 always counts in full; heads from max(start, 1) add
      for (int64_t j = std::max<int64_t>(span.start, 1); j < span.stop; ++j)
        v += double(w[j - span.start]) * src[j * block + e];
      return v;
    };
    for (int64_t e = 0; e < out * in; ++e)
      EXPECT_NEAR(h.w[e], direct(dense_weight(bank), out * in, e), 2e-7)
          << "[" << span.start << ", " << span.stop << ")";
    for (int64_t e = 0; e < out; ++e) EXPECT_NEAR(h.b[e], direct(bank.b, out, e), 2e-7);
    if (span.stop == 1) EXPECT_EQ(h.w, FloatVec(bank.w.begin(), bank.w.begin() + out * in));
  }
}

const H3Model& pdd_model() {
  static const H3Model m = [] {
    const std::string path = tmp("pdd4.safetensors");
    test::write_pdd_file(path, 4);
    return load_model(path);
  }();
  return m;
}

TEST(PddHead, ForwardUsesTheStepsEffectiveHeads) {
  const H3Model& m = pdd_model();
  ASSERT_EQ(m.config.pdd_heads, 4);
  const test::GoldenInputs& g = test::golden_inputs();
  for (int step : {0, 1}) {  // 2 steps: heads [0, 2) then [2, 4)
    const SigmaSchedule s = schedule(2, step);
    ForwardInputs in = g.inputs();
    in.schedule = &s;
    const ForwardOutputs got = forward_cpu(m, in, Precision::fp32);
    // The same model with plain heads set to the directly computed effective heads.
    H3Model plain = m;
    plain.config.pdd_heads = 1;
    const model::PddSpan span = model::pdd_span(4, s);
    plain.weights.video_out =
        model::pdd_effective_head(m.weights.video_out, 4, span, model::pdd_weights(4, span, 12.0));
    plain.weights.audio_out =
        model::pdd_effective_head(m.weights.audio_out, 4, span, model::pdd_weights(4, span, 3.0));
    const ForwardOutputs want = forward_cpu(plain, g.inputs(), Precision::fp32);
    test::expect_same_bits(got.video_velocity, want.video_velocity, "video");
    test::expect_same_bits(got.audio_velocity, want.audio_velocity, "audio");
    // And the heads differ between the two steps' spans (the bank matters).
    if (step == 1) {
      const SigmaSchedule s0 = schedule(2, 0);
      in.schedule = &s0;
      EXPECT_NE(forward_cpu(m, in, Precision::fp32).video_velocity, got.video_velocity);
    }
  }
}

// The flow shifts of a forward request (ComfyUI: transformer_options' sigma shifts) pick the span
// (video shift) and weight each stream's heads by its own shift, as the schedule's do.
TEST(PddHead, ForwardRequestShiftsReachTheHeads) {
  pdd_model();  // writes pdd4.safetensors in this process's folder
  ModelSource src;
  src.checkpoint = tmp("pdd4.safetensors");
  auto d = Denoiser::create(src);
  const Request r = make_request(d->config(), RequestOptions{});
  EvalOptions o;
  o.sample_sigmas = sigma_grid(4, 5.0f);  // 3 steps at shift 5
  o.shifts = {5.0, 2.5};
  const float sigma = o.sample_sigmas[1];
  const SigmaSchedule s{sigma, o.sample_sigmas, 5.0, 2.5};
  const ForwardOutputs got = forward_request(*d, r, sigma, o);
  const TimestepPlan plan =
      make_timestep_plan(r.layout, 1.0f - sigma, 1.0f - audio_sigma_from_video(sigma, 5.0, 2.5));
  const ForwardOutputs want =
      d->forward({r.layout, plan, r.video_rows.data(), r.audio_rows.data(), r.text.data(), &s});
  test::expect_same_bits(got.video_velocity, want.video_velocity, "video");
  test::expect_same_bits(got.audio_velocity, want.audio_velocity, "audio");
  // The heads' weights follow the shifts: default shifts on the same grid differ.
  EXPECT_NE(model::pdd_weights(4, model::pdd_span(4, s), 2.5),
            model::pdd_weights(4, model::pdd_span(4, s), 3.0));
  const SigmaSchedule plain{sigma, o.sample_sigmas};
  EXPECT_NE(
      d->forward({r.layout, plan, r.video_rows.data(), r.audio_rows.data(), r.text.data(), &plain})
          .audio_velocity,
      got.audio_velocity);
}

TEST(PddHead, ForwardWithoutScheduleIsAClearError) {
  try {
    forward_cpu(pdd_model(), test::golden_inputs().inputs(), Precision::fp32);
    FAIL() << "a PDD bank ran without a schedule";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("PDD head bank (n=4) needs the sampler's sigma schedule"),
              std::string::npos)
        << e.what();
  }
}

TEST(PddHead, MismatchedBankSizesAreRejected) {
  pdd_model();  // writes pdd4.safetensors in this process's folder
  const SafetensorsFile f = SafetensorsFile::open(tmp("pdd4.safetensors"));
  NamedTensors t;
  for (const auto& e : f.entries()) {
    Tensor x = f.get(e.name);
    if (e.name == "final_layer.audio_out.weight") x = x.slice(0, 0, 96);  // 3 heads, not 4
    t.emplace_back(e.name, x);
  }
  const std::string path = tmp("pdd_bad.safetensors");
  write_safetensors(path, t);
  try {
    load_model(path);
    FAIL() << "a mismatched bank loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'final_layer.audio_out.weight' in " + path +
                                         " has shape [96, 192], expected [128, 192]"),
              std::string::npos)
        << e.what();
  }
}

TEST(PddHead, GateCompressKeysLoadAndAreIgnored) {
  const SafetensorsFile f = SafetensorsFile::open(test::golden_weights());
  NamedTensors t;
  for (const auto& e : f.entries()) t.emplace_back(e.name, f.get(e.name));
  t.emplace_back("blocks.0.attn.to_gate_compress.weight", Tensor::zeros(DType::bf16, {256, 192}));
  t.emplace_back("blocks.1.attn.to_gate_compress.bias", Tensor::zeros(DType::bf16, {256}));
  const std::string path = tmp("vsa.safetensors");
  write_safetensors(path, t);
  const H3Model m = load_model(path);
  const H3Model ref = load_model(test::golden_weights());
  const ForwardInputs in = test::golden_inputs().inputs();
  EXPECT_EQ(forward_cpu(m, in, Precision::fp32).video_velocity,
            forward_cpu(ref, in, Precision::fp32).video_velocity);
  // Beyond the model's blocks the key is unexpected.
  t.emplace_back("blocks.7.attn.to_gate_compress.weight", Tensor::zeros(DType::bf16, {4}));
  write_safetensors(path, t);
  try {
    load_model(path);
    FAIL() << "blocks.7 loaded in a 2-block model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected key 'blocks.7.attn.to_gate_compress.weight'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace h3rt
