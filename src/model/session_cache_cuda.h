// First-block step caching in the GPU forward session (h3rt/hybrid.h): the device buffers
// (fixed pointers, so the step's parts can be graphs) and the token a run's StepCache holds,
// naming this session and the refresh it made, so that a cache refreshed by another run or
// session reads as "no cached step".
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/pinned.h"
#include "h3rt/hybrid.h"
#include "h3rt/tensor.h"

namespace h3rt::model {

class SessionStepCache {
 public:
  SessionStepCache(int64_t rows, int64_t hidden);
  SessionStepCache(const SessionStepCache&) = delete;
  SessionStepCache& operator=(const SessionStepCache&) = delete;
  ~SessionStepCache();

  void ensure(cudaStream_t s);               // the buffers, on first use (outside any capture)
  bool holds(const StepCache& cache) const;  // `cache` was refreshed by this session, last

  // Part A's device work around block 0 of the packed rows x: keep its input (before it) and
  // its output, and the relative L1 of its residual against the cached one to pinned memory
  // (after it).
  void enqueue_keep_input(const __nv_bfloat16* x, cudaStream_t s);
  void enqueue_compare(const __nv_bfloat16* x, cudaStream_t s);
  // After part A: waits for it and returns the relative L1 (NaN unless `have`).
  double wait_rel(bool have, cudaStream_t s);
  // Part B: a reuse adds the cached residual of blocks 1..end to block 0's output; a computed
  // step refreshes the cached residuals from its final rows, then refreshed() hands `cache`
  // this session's token.
  void enqueue_apply(__nv_bfloat16* x, cudaStream_t s);
  void enqueue_refresh(const __nv_bfloat16* x, cudaStream_t s);
  void refreshed(StepCache& cache);

 private:
  const int64_t n_;     // rows x hidden
  const uint64_t uid_;  // not an address: a later session may reuse it
  uint64_t generation_ = 0;
  Tensor in0_, out0_;             // [S, H] bf16: block 0's input and output of this step
  Tensor block0_res_, rest_res_;  // [S, H] f32 of the refreshing step
  Tensor partials_, rel_;         // the reduction's doubles
  cuda::Pinned h_rel_;            // the one value the host waits for
  cudaEvent_t ev_rel_ = nullptr;
};

}  // namespace h3rt::model
