#include <algorithm>
#include <cmath>

#include "bench/sustained_run.h"
#include "cuda/runtime.h"

namespace h3rt::bench {

SustainedRun run_sustained(TelemetrySampler& t, double unit_ms, double seconds,
                           const std::function<void()>& launch_one, cudaStream_t s) {
  const int n = std::max(3, static_cast<int>(std::ceil(seconds * 1e3 / std::max(unit_ms, 1e-3))));
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));
  SustainedRun r;
  const double t0 = t.now_ms();
  r.energy.begin_mj = t.energy_mj();
  for (int i = 0; i < n; ++i) launch_one();
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));
  r.energy.end_mj = t.energy_mj();
  r.wall_ms = t.now_ms() - t0;
  r.energy.units = n;
  r.power = summarize(t.samples(), {{t0, t0 + r.wall_ms}});
  return r;
}

}  // namespace h3rt::bench
