// Host-side pieces of the GPU forward session (forward_session_cuda.cu): the float32 islands'
// GEMMs, the AdaLN input rows, layout checks, row runs, stage timing and the finite checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cuda/pinned.h"
#include "h3rt/model.h"
#include "model/model_cuda.h"

namespace h3rt::model {

// Milliseconds of wall time since t (host timings of the session's steps).
inline double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// cuBLAS workspace of the float32 islands: a fixed buffer keeps their calls capture-safe.
inline constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

// y [rows, out] = x [rows, in] W^T + b in plain float32 (no TF32, as the reference's islands):
// a patch projection or an output head.
void linear_f32(const DeviceLinear& l, const float* x, float* y, int64_t rows, void* workspace,
                cudaStream_t s);
// y = x W^T + b with bf16 rows (the bf16 linear kernel).
void linear_bf16(const DeviceLinear& l, const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows,
                 cudaStream_t s);

// The input of every AdaLN linear [M, Tm] (host float32 math): silu(temb) rounded to bf16, or
// for the curve form the interpolated table rows in float32 [M, rank].
void adaln_input(const DeviceModel& m, const std::vector<float>& timesteps, void* out);

// Throws unless the text rows come first and the target audio and video rows are each one
// contiguous run (ComfyUI's layouts).
void check_packed_order(const SequenceLayout& L);
bool same_layout(const SequenceLayout& a, const SequenceLayout& b);

// Runs of consecutive packed rows: row dst .. dst + rows - 1 takes source rows src ...
struct RowRun {
  int64_t dst, src, rows;
};
std::vector<RowRun> row_runs(const std::vector<int64_t>& idx);

// Stage times from events recorded in stream order; a stage may be entered many times.
class StageTimer {
 public:
  StageTimer() = default;
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  ~StageTimer();
  void begin(cudaStream_t s);
  void mark(const char* stage);  // ends the previous stage, starts `stage` (null: none)
  std::map<std::string, double> totals() const;  // after the stream has finished

 private:
  cudaStream_t s_ = nullptr;
  std::vector<cudaEvent_t> events_;
  std::vector<const char*> marks_;
};

// The finite checks of a step (ForwardSessionCuda::set_check_finite): each checked stage lowers
// one device flag to its tag when its output holds NaN or Inf; the host reads it after the wait.
class FiniteFlags {
 public:
  static constexpr int kTextTag = 0, kInputTag = 1, kBlockTag = 2;  // block i: kBlockTag + i
  bool on = false;
  void begin(cudaStream_t s);  // before the step's first check: clears the flag
  void flag(const void* x, bool bf16, int64_t n, int tag, cudaStream_t s);  // when on
  void end(cudaStream_t s);  // after the step's work: the flag to the host
  // After the wait: throws NonFinite naming the first flagged stage (`blocks` blocks).
  void throw_if_flagged(int blocks) const;

 private:
  Tensor flag_;  // [1] int32
  cuda::Pinned h_flag_;
};

}  // namespace h3rt::model
