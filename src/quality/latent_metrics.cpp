// The latent comparison metrics of h3rt/quality.h (definitions there).
#include <algorithm>
#include <cmath>

#include "core/pair_sums.h"
#include "h3rt/check.h"
#include "h3rt/quality.h"

namespace h3rt {
namespace {

// SSIM of one plane [h, w] (row-major, row stride w) with the windows of the header.
struct PlaneSsim {
  double sum = 0;
  int64_t windows = 0;
};

void plane_ssim(const float* a, const float* b, int64_t h, int64_t w, double range,
                PlaneSsim& out) {
  const int64_t wh = std::min<int64_t>(7, h), ww = std::min<int64_t>(7, w);
  const double n = double(wh * ww), norm = n > 1 ? n - 1 : 1;
  const double c1 = (0.01 * range) * (0.01 * range), c2 = (0.03 * range) * (0.03 * range);
  for (int64_t y0 = 0; y0 + wh <= h; ++y0)
    for (int64_t x0 = 0; x0 + ww <= w; ++x0) {
      double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0;
      for (int64_t y = y0; y < y0 + wh; ++y)
        for (int64_t x = x0; x < x0 + ww; ++x) {
          const double va = a[y * w + x], vb = b[y * w + x];
          sa += va;
          sb += vb;
          saa += va * va;
          sbb += vb * vb;
          sab += va * vb;
        }
      const double ma = sa / n, mb = sb / n;
      const double va = std::max(0.0, (saa - n * ma * ma) / norm);
      const double vb = std::max(0.0, (sbb - n * mb * mb) / norm);
      const double cab = (sab - n * ma * mb) / norm;
      out.sum +=
          ((2 * ma * mb + c1) * (2 * cab + c2)) / ((ma * ma + mb * mb + c1) * (va + vb + c2));
      ++out.windows;
    }
}

// [C, T, Hl, Wl] of a video shape with an optional leading 1.
Shape video_dims(const Shape& s) {
  H3RT_CHECK((s.size() == 5 && s[0] == 1) || s.size() == 4, "video latents: shape ", shape_str(s),
             ", expected [1, C, T, Hl, Wl] or [C, T, Hl, Wl]");
  return s.size() == 5 ? Shape(s.begin() + 1, s.end()) : s;
}

}  // namespace

VideoComparison compare_video(const float* a, const float* b, const Shape& shape) {
  const Shape d = video_dims(shape);
  const int64_t C = d[0], T = d[1], plane = d[2] * d[3], n = C * T * plane;
  VideoComparison r;
  r.shape = shape;
  if (n > 0) {
    const auto [lo, hi] = std::minmax_element(a, a + n);
    r.data_range = *hi > *lo ? double(*hi) - double(*lo) : 1.0;
  }
  PairSums all;
  double ssim_sum = 0;
  for (int64_t t = 0; t < T; ++t) {
    PairSums s;
    PlaneSsim ss;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t off = (c * T + t) * plane;
      for (int64_t i = 0; i < plane; ++i) s.add(a[off + i], b[off + i]);
      plane_ssim(a + off, b + off, d[2], d[3], r.data_range, ss);
    }
    const double ssim = ss.windows ? ss.sum / double(ss.windows) : 1.0;
    r.frames.push_back({s.rel_l2(), s.cosine(), s.psnr(r.data_range), ssim});
    ssim_sum += ssim;
    all.add(s);
  }
  r.overall = {all.rel_l2(), all.cosine(), all.psnr(r.data_range), T ? ssim_sum / double(T) : 1.0};
  return r;
}

AudioComparison compare_audio(const float* a, const float* b, const Shape& shape) {
  const int64_t n = shape_numel(shape);
  AudioComparison r;
  r.shape = shape;
  PairSums s;
  double ma = 0, mb = 0;
  for (int64_t i = 0; i < n; ++i) {
    s.add(a[i], b[i]);
    ma += a[i];
    mb += b[i];
  }
  r.rel_l2 = s.rel_l2();
  if (n == 0 || s.dd == 0) return r;  // identical: pearson 1
  ma /= double(n);
  mb /= double(n);
  double cab = 0, caa = 0, cbb = 0;
  for (int64_t i = 0; i < n; ++i) {
    cab += (a[i] - ma) * (b[i] - mb);
    caa += (a[i] - ma) * (a[i] - ma);
    cbb += (b[i] - mb) * (b[i] - mb);
  }
  r.pearson = caa > 0 && cbb > 0 ? cab / std::sqrt(caa * cbb) : 0.0;
  return r;
}

}  // namespace h3rt
