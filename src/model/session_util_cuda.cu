// Host-side pieces of the GPU forward session (session_util_cuda.h).
#include <cublas_v2.h>

#include <algorithm>
#include <mutex>

#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "h3rt/formats.h"
#include "model/session_util_cuda.h"
#include "ops/adaln_curve/adaln_curve.h"
#include "ops/finite_check/finite_check.h"
#include "ops/linear/linear.h"
#include "ops/swiglu/swiglu.h"
#include "ops/time_embedding/time_embedding.h"

namespace h3rt::model {
namespace {

__global__ void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __fadd_rn(y[i], b[i % cols]);
}

int grid_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + 255) / 256, 8192));
}

// The workspace is given explicitly (cublasSetStream resets it to the library's pool, which may
// allocate).
cublasHandle_t cublas(cudaStream_t s, void* workspace) {
  static std::mutex mu;
  static cublasHandle_t h = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (!h) {
    H3RT_CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
    // Plain float32 (no TF32): the reference's fp32 islands run with TF32 off.
    H3RT_CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH) == CUBLAS_STATUS_SUCCESS,
               "cublasSetMathMode failed");
  }
  H3RT_CHECK(cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS, "cublasSetStream failed");
  H3RT_CHECK(cublasSetWorkspace(h, workspace, kCublasWorkspaceBytes) == CUBLAS_STATUS_SUCCESS,
             "cublasSetWorkspace failed");
  return h;
}

}  // namespace

void linear_f32(const DeviceLinear& l, const float* x, float* y, int64_t rows, void* workspace,
                cudaStream_t s) {
  const float one = 1.0f, zero = 0.0f;
  // Column-major view: y^T [out, rows] = W [out, in] . x^T [in, rows].
  H3RT_CHECK(cublasSgemm(cublas(s, workspace), CUBLAS_OP_T, CUBLAS_OP_N, int(l.out), int(rows),
                         int(l.in), &one, l.w.ptr<float>(), int(l.in), x, int(l.in), &zero, y,
                         int(l.out)) == CUBLAS_STATUS_SUCCESS,
             "cublasSgemm failed (", rows, " x ", l.in, " -> ", l.out, ")");
  if (l.b.data()) {
    add_bias_rows<<<grid_for(rows * l.out), 256, 0, s>>>(y, l.b.ptr<float>(), rows, l.out);
    H3RT_CUDA_CHECK(cudaGetLastError());
  }
}

void linear_bf16(const DeviceLinear& l, const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows,
                 cudaStream_t s) {
  using bf16 = __nv_bfloat16;
  ops::LinearCudaParams p{
      x, l.w.ptr<bf16>(), l.b.data() ? l.b.ptr<bf16>() : nullptr, y, rows, l.in, l.out};
  H3RT_CUDA_CHECK(ops::linear_bf16_cuda(p, s));
}

void adaln_input(const DeviceModel& m, const std::vector<float>& timesteps, void* out) {
  const H3Config& c = m.config;
  const int64_t M = static_cast<int64_t>(timesteps.size());
  if (c.adaln_curve()) {
    ops::adaln_curve_embed_cpu({m.adaln_t_table.data(), timesteps.data(), static_cast<float*>(out),
                                c.adaln_curve_grid, c.adaln_curve_rank, M});
    return;
  }
  FloatVec sinusoid(M * c.freq_dim), temb(M * c.time_embed_dim);
  ops::TimeEmbeddingParams p;
  p.t = timesteps.data();
  p.w_in = m.time_in_w.data();
  p.b_in = m.time_in_b.data();
  p.w_out = m.time_out_w.data();
  p.b_out = m.time_out_b.data();
  p.sinusoid = sinusoid.data();
  p.temb = temb.data();
  p.count = M;
  p.dim = c.freq_dim;
  p.hidden = c.time_embed_hidden;
  p.embed = c.time_embed_dim;
  ops::time_embedding_cpu(p);
  uint16_t* bits = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < temb.size(); ++i) bits[i] = f32_to_bf16(ops::silu(temb[i]));
}

void check_packed_order(const SequenceLayout& L) {
  bool ok = true;
  for (int64_t i = 0; i < L.text_len; ++i) ok &= L.text_indices[i] == i;
  for (size_t i = 1; i < L.audio_indices.size(); ++i)
    ok &= L.audio_indices[i] == L.audio_indices[0] + int64_t(i);
  for (size_t i = 1; i < L.video_indices.size(); ++i)
    ok &= L.video_indices[i] == L.video_indices[0] + int64_t(i);
  H3RT_CHECK(ok,
             "the CUDA forward expects the text rows first and the target audio and video "
             "rows each contiguous");
}

bool same_layout(const SequenceLayout& a, const SequenceLayout& b) {
  return a.text_len == b.text_len && a.audio_len == b.audio_len && a.frames == b.frames &&
         a.height == b.height && a.width == b.width && a.token_tags == b.token_tags &&
         a.position_ids == b.position_ids && a.segments == b.segments &&
         a.audio_indices == b.audio_indices && a.video_indices == b.video_indices &&
         a.cond_video_indices == b.cond_video_indices &&
         a.cond_audio_indices == b.cond_audio_indices;
}

std::vector<RowRun> row_runs(const std::vector<int64_t>& idx) {
  std::vector<RowRun> runs;
  for (size_t i = 0; i < idx.size(); ++i) {
    if (!runs.empty() && runs.back().dst + runs.back().rows == idx[i])
      ++runs.back().rows;
    else
      runs.push_back({idx[i], int64_t(i), 1});
  }
  return runs;
}

StageTimer::~StageTimer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void StageTimer::begin(cudaStream_t s) {
  marks_.clear();
  s_ = s;
}

void StageTimer::mark(const char* stage) {
  if (marks_.size() == events_.size()) {
    cudaEvent_t e;
    H3RT_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  H3RT_CUDA_CHECK(cudaEventRecord(events_[marks_.size()], s_));
  marks_.push_back(stage);
}

std::map<std::string, double> StageTimer::totals() const {
  std::map<std::string, double> t;
  for (size_t i = 0; i + 1 < marks_.size(); ++i) {
    if (!marks_[i]) continue;
    float ms = 0;
    H3RT_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    t[marks_[i]] += ms;
  }
  return t;
}

void FiniteFlags::begin(cudaStream_t s) {
  if (!on) return;
  if (!flag_.defined()) {
    flag_ = cuda::device_empty(DType::i32, {1});
    h_flag_ = cuda::Pinned(4);
  }
  H3RT_CUDA_CHECK(cudaMemsetAsync(flag_.data(), 0x7f, 4, s));
}

void FiniteFlags::flag(const void* x, bool bf16, int64_t n, int tag, cudaStream_t s) {
  if (on) H3RT_CUDA_CHECK(ops::flag_non_finite_cuda(x, bf16, n, tag, flag_.ptr<int>(), s));
}

void FiniteFlags::end(cudaStream_t s) {
  if (on)
    H3RT_CUDA_CHECK(
        cudaMemcpyAsync(h_flag_.as<void>(), flag_.data(), 4, cudaMemcpyDeviceToHost, s));
}

void FiniteFlags::throw_if_flagged(int blocks) const {
  if (!on) return;
  const int tag = *h_flag_.as<int>();
  if (tag == ops::kFiniteFlagClear) return;
  if (tag == kTextTag)
    throw NonFinite("the token refiner's output (token_refiner.*) holds NaN or Inf");
  if (tag == kInputTag)
    throw NonFinite("the packed input rows (patch projections and condition_proj) hold NaN or Inf");
  const int i = tag - kBlockTag;
  if (i == blocks)
    throw NonFinite("the velocities (final_layer.video_out / audio_out) hold NaN or Inf");
  throw NonFinite(detail::concat("the output of block ", i, " (blocks.", i, ".*) holds NaN or ",
                                 "Inf (the GPU check names the block, not the row)"));
}

}  // namespace h3rt::model
