// First-block step caching in the GPU forward session (session_cache_cuda.h).
#include <atomic>
#include <cmath>
#include <memory>

#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "h3rt/memory.h"
#include "model/session_cache_cuda.h"
#include "model/step_cache_cuda.h"

namespace h3rt::model {
namespace {

uint64_t next_session_uid() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

struct CacheToken : StepCache::State {
  CacheToken(uint64_t o, uint64_t g) : owner(o), generation(g) {}
  uint64_t owner;
  uint64_t generation;
};

}  // namespace

SessionStepCache::SessionStepCache(int64_t rows, int64_t hidden)
    : n_(rows * hidden), uid_(next_session_uid()) {}

SessionStepCache::~SessionStepCache() {
  if (ev_rel_) cudaEventDestroy(ev_rel_);
}

void SessionStepCache::ensure(cudaStream_t s) {
  if (ev_rel_) return;
  const MemoryScope scope("the step cache's buffers");
  in0_ = cuda::device_empty(DType::bf16, {n_});
  out0_ = cuda::device_empty(DType::bf16, {n_});
  block0_res_ = cuda::device_empty(DType::f32, {n_});
  rest_res_ = cuda::device_empty(DType::f32, {n_});
  partials_ = cuda::device_empty(DType::f64, {2 * kStepCacheReduceBlocks});
  rel_ = cuda::device_empty(DType::f64, {1});
  h_rel_ = cuda::Pinned(sizeof(double));
  H3RT_CUDA_CHECK(cudaMemsetAsync(block0_res_.data(), 0, block0_res_.nbytes(), s));
  H3RT_CUDA_CHECK(cudaEventCreateWithFlags(&ev_rel_, cudaEventDisableTiming));
}

bool SessionStepCache::holds(const StepCache& cache) const {
  const auto* t = dynamic_cast<const CacheToken*>(cache.state.get());
  return t && t->owner == uid_ && t->generation == generation_;
}

void SessionStepCache::enqueue_keep_input(const __nv_bfloat16* x, cudaStream_t s) {
  H3RT_CUDA_CHECK(cudaMemcpyAsync(in0_.data(), x, n_ * 2, cudaMemcpyDeviceToDevice, s));
}

void SessionStepCache::enqueue_compare(const __nv_bfloat16* x, cudaStream_t s) {
  using bf16 = __nv_bfloat16;
  H3RT_CUDA_CHECK(cudaMemcpyAsync(out0_.data(), x, n_ * 2, cudaMemcpyDeviceToDevice, s));
  H3RT_CUDA_CHECK(step_cache_rel_l1_cuda(in0_.ptr<bf16>(), out0_.ptr<bf16>(),
                                         block0_res_.ptr<float>(), n_, partials_.ptr<double>(),
                                         rel_.ptr<double>(), s));
  H3RT_CUDA_CHECK(
      cudaMemcpyAsync(h_rel_.as<void>(), rel_.data(), sizeof(double), cudaMemcpyDeviceToHost, s));
}

double SessionStepCache::wait_rel(bool have, cudaStream_t s) {
  H3RT_CUDA_CHECK(cudaEventRecord(ev_rel_, s));
  H3RT_CUDA_CHECK(cudaEventSynchronize(ev_rel_));
  return have ? *h_rel_.as<double>() : NAN;
}

void SessionStepCache::enqueue_apply(__nv_bfloat16* x, cudaStream_t s) {
  H3RT_CUDA_CHECK(step_cache_apply_cuda(x, rest_res_.ptr<float>(), n_, s));
}

void SessionStepCache::enqueue_refresh(const __nv_bfloat16* x, cudaStream_t s) {
  using bf16 = __nv_bfloat16;
  H3RT_CUDA_CHECK(step_cache_refresh_cuda(in0_.ptr<bf16>(), out0_.ptr<bf16>(), x,
                                          block0_res_.ptr<float>(), rest_res_.ptr<float>(), n_, s));
}

void SessionStepCache::refreshed(StepCache& cache) {
  cache.state = std::make_unique<CacheToken>(uid_, ++generation_);
  cache.refreshed();
}

}  // namespace h3rt::model
