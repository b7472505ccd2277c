// The sparse check of a block-sparse Sage call (attention.h attention_sparse_check_cuda): block
// lists naming only the sampled query tiles, the Sage kernel on them (the pre-pass of the sparse
// call reused), and the per-head L1 sums, in a fixed order on one CTA per head.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/runtime.h"
#include "h3rt/check.h"
#include "ops/attention/attention.h"
#include "ops/attention_sage/attention_sage_cuda.h"

namespace h3rt::ops {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kD = 128, kMaxTiles = 64, kListThreads = 128, kSumThreads = 256;

size_t align256(size_t x) {
  return (x + 255) / 256 * 256;
}

struct CheckShape {
  int64_t q_tile, nq, nk;
};
CheckShape check_shape(int64_t rows) {
  const int64_t q_tile = attention_sparse_query_tile();
  return {q_tile, (rows + q_tile - 1) / q_tile, (rows + 127) / 128};
}

// Block (tile, head): the full list for a sampled tile, an empty one otherwise.
__global__ void __launch_bounds__(kListThreads)
    check_lists_kernel(const int32_t* tiles, int n_tiles, int32_t* index, int32_t* count, int nq,
                       int nk) {
  const int tile = blockIdx.x, h = blockIdx.y;
  bool sampled = false;
  for (int i = 0; i < n_tiles; ++i) sampled |= tiles[i] == tile;
  const int64_t t = static_cast<int64_t>(h) * nq + tile;
  if (threadIdx.x == 0) count[t] = sampled ? nk : 0;
  if (!sampled) return;
  for (int j = threadIdx.x; j < nk; j += blockDim.x) index[t * nk + j] = j;
}

// Block h: sums of |out - dense| and |dense| over the sampled rows of head h. Per tile (in the
// given order) thread t takes elements t, t + 256, ... of its rows x 128 channels; then a fixed
// shared-memory tree.
__global__ void __launch_bounds__(kSumThreads)
    check_sums_kernel(const bf16* out, int64_t out_stride, const bf16* dense, int64_t dense_stride,
                      const int32_t* tiles, int n_tiles, int64_t q_tile, int64_t seq,
                      double* sums) {
  __shared__ double s_diff[kSumThreads], s_ref[kSumThreads];
  const int h = blockIdx.x, tid = threadIdx.x;
  double diff = 0.0, ref = 0.0;
  for (int k = 0; k < n_tiles; ++k) {
    const int64_t r0 = static_cast<int64_t>(tiles[k]) * q_tile;
    const int64_t r1 = r0 + q_tile < seq ? r0 + q_tile : seq;
    const int64_t n = (r1 > r0 ? r1 - r0 : 0) * kD;
    for (int64_t e = tid; e < n; e += kSumThreads) {
      const int64_t r = r0 + e / kD, c = h * kD + e % kD;
      const double s = __bfloat162float(out[r * out_stride + c]);
      const double d = __bfloat162float(dense[r * dense_stride + c]);
      diff += fabs(s - d);
      ref += fabs(d);
    }
  }
  s_diff[tid] = diff;
  s_ref[tid] = ref;
  __syncthreads();
  for (int w = kSumThreads / 2; w > 0; w /= 2) {
    if (tid < w) {
      s_diff[tid] += s_diff[tid + w];
      s_ref[tid] += s_ref[tid + w];
    }
    __syncthreads();
  }
  if (tid == 0) {
    sums[2 * h] = s_diff[0];
    sums[2 * h + 1] = s_ref[0];
  }
}

}  // namespace

size_t attention_sparse_check_workspace_bytes(int64_t rows, int64_t heads) {
  const CheckShape s = check_shape(rows);
  return align256(static_cast<size_t>(heads * s.nq * s.nk) * 4) +
         align256(static_cast<size_t>(heads * s.nq) * 4);
}

cudaError_t attention_sparse_check_cuda(const AttentionCudaParams& p,
                                        const SparseCheckCudaParams& c, cudaStream_t stream) {
  const int64_t I = p.heads * kD;
  H3RT_CHECK(p.head_dim == kD && p.rows > 0 && p.heads > 0 && p.heads <= 65535 && p.out,
             "attention_sparse_check_cuda: needs the sparse Sage call's parameters with its bf16 "
             "output (head_dim 128)");
  H3RT_CHECK(c.tiles && c.n_tiles >= 1 && c.n_tiles <= kMaxTiles && c.dense_out && c.sums,
             "attention_sparse_check_cuda: tiles (1 to ", kMaxTiles,
             "), dense_out and sums needed");
  H3RT_CHECK(p.workspace && p.workspace_bytes >= attention_sage::sage_buffer_bytes(p.rows, p.heads),
             "attention_sparse_check_cuda: the Sage workspace of the sparse call is needed");
  const size_t need = attention_sparse_check_workspace_bytes(p.rows, p.heads);
  H3RT_CHECK(c.workspace && c.workspace_bytes >= need, "attention_sparse_check_cuda: workspace of ",
             c.workspace_bytes, " bytes, needs ", need);
  const CheckShape s = check_shape(p.rows);
  auto* base = static_cast<char*>(c.workspace);
  auto* index = reinterpret_cast<int32_t*>(base);
  auto* count = reinterpret_cast<int32_t*>(base + align256(size_t(p.heads * s.nq * s.nk) * 4));
  check_lists_kernel<<<dim3(static_cast<unsigned>(s.nq), static_cast<unsigned>(p.heads)),
                       kListThreads, 0, stream>>>(c.tiles, c.n_tiles, index, count,
                                                  static_cast<int>(s.nq), static_cast<int>(s.nk));
  cudaError_t e = H3RT_LAUNCH_CHECK("check_lists_kernel");
  if (e != cudaSuccess) return e;
  attention_sage::SageAttentionParams a;
  a.buf = attention_sage::sage_buffers(p.workspace, p.rows, p.heads);
  a.seq = p.rows;
  a.heads = p.heads;
  a.out = c.dense_out;
  a.out_row_stride = I;
  a.blocks = {index, count, p.heads, s.q_tile, s.nq, s.nk};
  e = attention_sage::sage_attention(a, stream);
  if (e != cudaSuccess) return e;
  const int64_t out_stride = p.out_row_stride ? p.out_row_stride : I;
  check_sums_kernel<<<static_cast<unsigned>(p.heads), kSumThreads, 0, stream>>>(
      p.out, out_stride, c.dense_out, I, c.tiles, c.n_tiles, s.q_tile, p.rows, c.sums);
  return H3RT_LAUNCH_CHECK("check_sums_kernel");
}

}  // namespace h3rt::ops
