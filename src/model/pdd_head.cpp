// PDD head banks: the heads a step spans and their effective head (see pdd_head.h).
#include "model/pdd_head.h"

#include <cmath>
#include <limits>

#include "h3rt/check.h"
#include "sampler/fp_exact.h"

namespace h3rt::model {

namespace {

// float64 ops with one rounding each (torch runs each op as its own kernel: nothing is fused).
double dmul(double a, double b) {
  volatile double p = a * b;
  return p;
}

// torch's float64 linspace(1, 0, points): the two halves filled from their ends.
std::vector<double> linspace_1_to_0(int64_t points) {
  const double step = -1.0 / static_cast<double>(points - 1);
  std::vector<double> g(points);
  for (int64_t i = 0; i < points; ++i)
    g[i] = i < points / 2 ? std::fma(step, double(i), 1.0)
                          : std::fma(-step, double(points - 1 - i), 0.0);
  return g;
}

}  // namespace

float pdd_base_sigma(float sigma, float from_shift) {
  const float one_minus_from = static_cast<float>(1.0 - static_cast<double>(from_shift));
  return fp::div(sigma, fp::add(from_shift, fp::mul(sigma, one_minus_from)));
}

PddSpan pdd_span(int64_t n, const SigmaSchedule& s) {
  H3RT_CHECK(!s.sample_sigmas.empty(), "PDD heads: the schedule has no sample_sigmas");
  const auto& sig = s.sample_sigmas;
  size_t i = 0;
  float best = std::numeric_limits<float>::infinity();
  for (size_t k = 0; k < sig.size(); ++k) {
    const float d = std::fabs(fp::sub(sig[k], s.sigma));
    if (d < best) best = d, i = k;
  }
  const float next = sig[std::min(i + 1, sig.size() - 1)];
  auto head = [&](float sigma) {  // Python round(): half to even (the default rounding mode)
    const float u = fp::sub(1.0f, pdd_base_sigma(sigma, static_cast<float>(s.shift_video)));
    return static_cast<int64_t>(std::nearbyint(static_cast<double>(u) * static_cast<double>(n)));
  };
  PddSpan span;
  span.start = std::min(head(s.sigma), n - 1);
  span.stop = std::max(head(next), span.start + 1);
  return span;
}

std::vector<float> pdd_weights(int64_t n, const PddSpan& span, double f) {
  H3RT_CHECK(span.start >= 0 && span.start < span.stop && span.stop <= n, "PDD heads: span [",
             span.start, ", ", span.stop, ") outside [0, ", n, ")");
  const std::vector<double> g = linspace_1_to_0(n + 1);
  std::vector<double> v(n + 1);
  for (int64_t j = 0; j <= n; ++j) v[j] = 1.0 - dmul(f, g[j]) / (1.0 + dmul(f - 1.0, g[j]));
  std::vector<double> dt;
  double sum = 0;
  for (int64_t j = span.start; j < span.stop; ++j) {
    dt.push_back(v[j + 1] - v[j]);
    sum += dt.back();
  }
  std::vector<float> w;
  for (double d : dt) w.push_back(static_cast<float>(d / sum));
  return w;
}

LinearWeight pdd_effective_head(const LinearWeight& bank, int64_t n, const PddSpan& span,
                                const std::vector<float>& w) {
  H3RT_CHECK(bank.out % n == 0 && bank.has_bias() && w.size() == size_t(span.stop - span.start),
             "PDD heads: layer '", bank.name, "' [", bank.out, ", ", bank.in, "] is not a bank of ",
             n, " heads with biases");
  LinearWeight h;
  h.name = bank.name;
  h.format = WeightFormat::f32;
  h.out = bank.out / n;
  h.in = bank.in;
  h.w.resize(h.out * h.in);
  h.b.resize(h.out);
  const int64_t first = std::max<int64_t>(span.start, 1);
  auto combine = [&](const FloatVec& src, FloatVec& dst, int64_t block) {
    for (int64_t e = 0; e < block; ++e) {
      double acc = 0.0;
      for (int64_t j = first; j < span.stop; ++j)
        acc += static_cast<double>(w[j - span.start]) * src[j * block + e];
      dst[e] = fp::add(src[e], static_cast<float>(acc));
    }
  };
  combine(dense_weight(bank), h.w, h.out * h.in);
  combine(bank.b, h.b, h.out);
  return h;
}

void check_pdd_schedule(const H3Config& c, const SigmaSchedule* s) {
  if (c.pdd_heads == 1) return;
  H3RT_CHECK(s != nullptr && !s->sample_sigmas.empty(),
             "forward: the checkpoint's PDD head bank (n=", c.pdd_heads,
             ") needs the sampler's sigma schedule (ForwardInputs::schedule: sigma and "
             "sample_sigmas; h3rt forward: --steps)");
}

OutputHeads pdd_output_heads(const H3Config& c, const H3Weights& wt, const SigmaSchedule* s) {
  check_pdd_schedule(c, s);
  const int64_t n = c.pdd_heads;
  const PddSpan span = pdd_span(n, *s);
  return {pdd_effective_head(wt.video_out, n, span, pdd_weights(n, span, s->shift_video)),
          pdd_effective_head(wt.audio_out, n, span, pdd_weights(n, span, s->shift_audio))};
}

}  // namespace h3rt::model
