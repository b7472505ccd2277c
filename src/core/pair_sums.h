// Sums over pairs (a = reference, b = test) from which relative L2, cosine and PSNR follow, with
// one convention for empty or all-zero sides: the latent comparison (h3rt/quality.h) and the
// self-test's error figures.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace h3rt {

struct PairSums {
  double aa = 0, bb = 0, ab = 0, dd = 0;
  int64_t n = 0;
  void add(double a, double b) {
    aa += a * a;
    bb += b * b;
    ab += a * b;
    dd += (b - a) * (b - a);
    ++n;
  }
  void add(const PairSums& o) {
    aa += o.aa;
    bb += o.bb;
    ab += o.ab;
    dd += o.dd;
    n += o.n;
  }
  // |b - a| / |a|; 0 when both are zero, infinite when only a is.
  double rel_l2() const {
    return aa > 0 ? std::sqrt(dd / aa) : (dd > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  }
  // 1 when both sides are zero, 0 when one is.
  double cosine() const {
    if (aa == 0 && bb == 0) return 1.0;
    if (aa == 0 || bb == 0) return 0.0;
    return ab / std::sqrt(aa * bb);
  }
  double psnr(double range) const {
    if (dd == 0) return std::numeric_limits<double>::infinity();
    return 10.0 * std::log10(range * range / (dd / double(n)));
  }
};

}  // namespace h3rt
