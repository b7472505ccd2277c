// First-block step caching, CPU side: float32 residuals kept in the run's StepCache.
#include "model/step_cache_cpu.h"

#include <cmath>

#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "h3rt/memory.h"

namespace h3rt::model {
namespace {

struct CpuState : StepCache::State {
  FloatVec block0_residual;  // block 0's output minus its input, of the refreshing step
  FloatVec rest_residual;    // final hidden minus block 0's output, of that step
};

const CpuState* cpu_state(const StepCache& cache, int64_t n) {
  const auto* s = dynamic_cast<const CpuState*>(cache.state.get());
  return s && static_cast<int64_t>(s->block0_residual.size()) == n ? s : nullptr;
}

}  // namespace

double step_cache_rel_l1_cpu(const StepCache& cache, const float* in0, const float* out0,
                             int64_t n) {
  const CpuState* s = cpu_state(cache, n);
  if (!s) return NAN;
  double diff = 0, ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float r = out0[i] - in0[i];  // as stored at refresh
    const double p = s->block0_residual[i];
    diff += std::fabs(double(r) - p);
    ref += std::fabs(p);
  }
  return ref > 0 ? diff / ref : (diff > 0 ? INFINITY : 0.0);
}

void step_cache_apply_cpu(const StepCache& cache, float* x, int64_t n, bool bf16) {
  const CpuState* s = cpu_state(cache, n);
  H3RT_CHECK(s, "step cache: no cached residual of ", n, " values to apply");
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] + s->rest_residual[i];
    x[i] = bf16 ? round_bf16(v) : v;
  }
}

void step_cache_refresh_cpu(StepCache& cache, const float* in0, const float* out0,
                            const float* final_x, int64_t n) {
  auto s = std::make_unique<CpuState>();
  s->block0_residual.resize(n);
  s->rest_residual.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    s->block0_residual[i] = out0[i] - in0[i];
    s->rest_residual[i] = final_x[i] - out0[i];
  }
  cache.state = std::move(s);
  cache.refreshed();
}

}  // namespace h3rt::model
