// The bf16 forward on the GPU (see model_cuda.h for what runs where).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <mutex>
#include <vector>

#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "h3rt/formats.h"
#include "model/block_cuda.h"
#include "model/model_cuda.h"
#include "ops/linear/linear.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"
#include "ops/rope_table/rope_table.h"
#include "ops/swiglu/swiglu.h"
#include "ops/time_embedding/time_embedding.h"

namespace h3rt::model {
namespace {

using bf16 = __nv_bfloat16;

// ---- small conversions between the float32 islands and the bf16 stream -------------------

__global__ void f32_to_bf16_rows(const float* src, int64_t src_stride, bf16* dst,
                                 int64_t dst_stride, int64_t rows, int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    dst[r * dst_stride + c] = __float2bfloat16_rn(src[r * src_stride + c]);
  }
}

__global__ void bf16_to_f32_rows(const bf16* src, int64_t src_stride, float* dst, int64_t rows,
                                 int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    dst[i] = __bfloat162float(src[r * src_stride + c]);
  }
}

__global__ void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __fadd_rn(y[i], b[i % cols]);
}

int grid_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + 255) / 256, 8192));
}

cublasHandle_t cublas(cudaStream_t s) {
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
  return h;
}

// y [rows, out] = x [rows, in] W^T + b, float32 (a patch projection or an output head).
void linear_f32(const DeviceLinear& l, const float* x, float* y, int64_t rows, cudaStream_t s) {
  const float one = 1.0f, zero = 0.0f;
  // Column-major view: y^T [out, rows] = W [out, in] . x^T [in, rows].
  H3RT_CHECK(cublasSgemm(cublas(s), CUBLAS_OP_T, CUBLAS_OP_N, int(l.out), int(rows), int(l.in),
                         &one, l.w.ptr<float>(), int(l.in), x, int(l.in), &zero, y,
                         int(l.out)) == CUBLAS_STATUS_SUCCESS,
             "cublasSgemm failed (", rows, " x ", l.in, " -> ", l.out, ")");
  if (l.b.data()) {
    add_bias_rows<<<grid_for(rows * l.out), 256, 0, s>>>(y, l.b.ptr<float>(), rows, l.out);
    H3RT_CUDA_CHECK(cudaGetLastError());
  }
}

void linear_bf16(const DeviceLinear& l, const bf16* x, bf16* y, int64_t rows, cudaStream_t s,
                 int64_t y_row_stride = 0) {
  ops::LinearCudaParams p{
      x, l.w.ptr<bf16>(), l.b.data() ? l.b.ptr<bf16>() : nullptr, y, rows, l.in, l.out,
      0, y_row_stride};
  H3RT_CUDA_CHECK(ops::linear_bf16_cuda(p, s));
}

template <typename T>
Tensor upload(const T* data, DType dtype, Shape shape, cudaStream_t s) {
  Tensor t = cuda::device_empty(dtype, shape);
  H3RT_CUDA_CHECK(cudaMemcpyAsync(t.data(), data, t.nbytes(), cudaMemcpyHostToDevice, s));
  return t;
}

Tensor upload_bf16(const float* v, Shape shape, cudaStream_t s) {
  std::vector<uint16_t> bits(shape_numel(shape));
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = f32_to_bf16(v[i]);
  Tensor t = upload(bits.data(), DType::bf16, std::move(shape), s);
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));  // `bits` dies here
  return t;
}

// silu(temb) cast to bf16, the input of every AdaLN linear [M, Tm] (host float32 math).
Tensor adaln_input(const DeviceModel& m, const std::vector<float>& timesteps, cudaStream_t s) {
  const H3Config& c = m.config;
  const int64_t M = static_cast<int64_t>(timesteps.size());
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
  for (float& v : temb) v = ops::silu(v);
  return upload_bf16(temb.data(), {M, c.time_embed_dim}, s);
}

// Text: condition_proj, the refiner blocks over the L text rows, and the final norm written into
// the packed stream's text rows.
void text_rows(const DeviceModel& m, const ForwardInputs& in, bf16* x_text, cudaStream_t s) {
  const H3Config& c = m.config;
  const int64_t L = in.layout.text_len;
  Tensor text = upload_bf16(in.text, {L, c.text_dim}, s);
  BlockCudaBuffers rb = make_block_buffers(c, L, 3, m.has_fp8());
  linear_bf16(m.text_in, text.ptr<bf16>(), rb.x.ptr<bf16>(), L, s);
  for (const DeviceBlock& b : m.refiner) block_forward_cuda(c, b, rb, s, nullptr, true);
  ops::RmsNormModulateCudaParams n;
  n.x = rb.x.ptr<bf16>();
  n.y = x_text;
  n.weight = m.refiner_norm.ptr<bf16>();
  n.rows = L;
  n.dim = c.hidden;
  n.eps = c.final_norm_eps;
  H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(n, s));
}

// A float32 patch projection of host rows, cast to bf16 into the packed stream.
void project_rows(const DeviceLinear& l, const float* rows_host, int64_t rows, bf16* x,
                  int64_t hidden, cudaStream_t s) {
  if (rows == 0) return;
  Tensor in = upload(rows_host, DType::f32, {rows, l.in}, s);
  Tensor out = cuda::device_empty(DType::f32, {rows, l.out});
  linear_f32(l, in.ptr<float>(), out.ptr<float>(), rows, s);
  f32_to_bf16_rows<<<grid_for(rows * l.out), 256, 0, s>>>(out.ptr<float>(), l.out, x, hidden, rows,
                                                          l.out);
  H3RT_CUDA_CHECK(cudaGetLastError());
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));  // `in` and `out` return to the arena
}

// An output head on the final norm's rows (bf16 -> float32), downloaded into `out`.
void head_rows(const DeviceLinear& l, const bf16* y, int64_t rows, int64_t hidden, FloatVec& out,
               cudaStream_t s) {
  out.resize(rows * l.out);
  if (rows == 0) return;
  Tensor yf = cuda::device_empty(DType::f32, {rows, hidden});
  Tensor v = cuda::device_empty(DType::f32, {rows, l.out});
  bf16_to_f32_rows<<<grid_for(rows * hidden), 256, 0, s>>>(y, hidden, yf.ptr<float>(), rows,
                                                           hidden);
  H3RT_CUDA_CHECK(cudaGetLastError());
  linear_f32(l, yf.ptr<float>(), v.ptr<float>(), rows, s);
  H3RT_CUDA_CHECK(cudaMemcpyAsync(out.data(), v.data(), v.nbytes(), cudaMemcpyDeviceToHost, s));
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));
}

void check_packed_order(const SequenceLayout& L) {
  bool ok = true;
  for (int64_t i = 0; i < L.text_len; ++i) ok &= L.text_indices[i] == i;
  for (int64_t i = 0; i < L.audio_rows(); ++i) ok &= L.audio_indices[i] == L.text_len + i;
  for (int64_t i = 0; i < L.video_rows(); ++i)
    ok &= L.video_indices[i] == L.text_len + L.audio_rows() + i;
  H3RT_CHECK(ok, "the CUDA forward expects the packed order [text | audio | video]");
}

}  // namespace

ForwardOutputs forward_cuda(const DeviceModel& m, const ForwardInputs& in) {
  const H3Config& c = m.config;
  const SequenceLayout& L = in.layout;
  check_packed_order(L);
  const int64_t S = L.seq_len(), H = c.hidden, M = in.plan.timestep.size();
  const int64_t audio0 = L.text_len, video0 = L.text_len + L.audio_rows();
  cuda::Stream s;
  H3RT_NVTX_RANGE("forward_cuda");

  Tensor silu_temb = adaln_input(m, in.plan.timestep, s);
  BlockCudaBuffers b = make_block_buffers(c, S, 3 * M, m.has_fp8());
  bf16* x = b.x.ptr<bf16>();
  text_rows(m, in, x, s);
  project_rows(m.audio_in, in.audio_rows, L.audio_rows(), x + audio0 * H, H, s);
  project_rows(m.video_in, in.video_rows, L.video_rows(), x + video0 * H, H, s);

  std::vector<float> cosv(S * c.rope_dim()), sinv(S * c.rope_dim());
  ops::rope_table_cpu(
      {L.position_ids.data(), m.rope_inv_freq.data(), cosv.data(), sinv.data(), S, c.rope_freqs});
  H3RT_CUDA_CHECK(
      cudaMemcpyAsync(b.cos.data(), cosv.data(), b.cos.nbytes(), cudaMemcpyHostToDevice, s));
  H3RT_CUDA_CHECK(
      cudaMemcpyAsync(b.sin.data(), sinv.data(), b.sin.nbytes(), cudaMemcpyHostToDevice, s));
  const std::vector<int64_t> rows = adaln_indices(L, in.plan);
  H3RT_CUDA_CHECK(
      cudaMemcpyAsync(b.row_index.data(), rows.data(), S * 8, cudaMemcpyHostToDevice, s));

  for (const DeviceBlock& blk : m.blocks) {
    // [M, 18H] is the [3M, 6H] table: row m*3 + modality.
    linear_bf16(blk.adaln, silu_temb.ptr<bf16>(), b.table.ptr<bf16>(), M, s);
    block_forward_cuda(c, blk, b, s);
  }

  // Final layer: [shift | scale] rows chosen by timestep index only.
  Tensor final_table = cuda::device_empty(DType::bf16, {M, 2 * H});
  linear_bf16(m.final_adaln, silu_temb.ptr<bf16>(), final_table.ptr<bf16>(), M, s);
  Tensor tidx = upload(in.plan.timestep_indices.data(), DType::i64, {S}, s);
  ops::RmsNormModulateCudaParams n;
  n.x = x;
  n.y = b.n.ptr<bf16>();
  n.weight = m.final_norm.ptr<bf16>();
  n.shift = final_table.ptr<bf16>();
  n.scale = final_table.ptr<bf16>() + H;
  n.row_table_index = tidx.ptr<int64_t>();
  n.rows = S;
  n.dim = H;
  n.table_row_stride = 2 * H;
  n.eps = c.final_norm_eps;
  H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(n, s));

  ForwardOutputs out;
  head_rows(m.video_out, b.n.ptr<bf16>() + video0 * H, L.video_rows(), H, out.video_velocity, s);
  head_rows(m.audio_out, b.n.ptr<bf16>() + audio0 * H, L.audio_rows(), H, out.audio_velocity, s);
  return out;
}

}  // namespace h3rt::model
