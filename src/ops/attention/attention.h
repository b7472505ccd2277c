// attention: dense bidirectional multi-head attention, softmax(q k^T * scale) v, no mask.
// q, k and v are read through row strides (head h at column h*head_dim), so they can be the
// three column blocks of the fused QKV projection output; the output is token-major [rows, I]
// with I = heads*head_dim (heads concatenated), ready for out_proj.
//
// CPU reference: scores, softmax and the weighted sum in double; the result is rounded to
// float32 and, when `round_bf16` is set, to bf16 (the bf16 run reads bf16 q/k/v, keeps the
// softmax in fp32 and writes bf16).
#pragma once

#include <cstdint>

#include "ops/attention_sparse/router.h"

namespace h3rt::ops {

struct AttentionParams {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0;  // 0: heads*head_dim
  float* out = nullptr;  // [rows, out_row_stride (0: heads*head_dim)]; must not alias q/k/v
  int64_t out_row_stride = 0;
  int64_t rows = 0, heads = 0, head_dim = 128;
  double scale = 0.0;  // 0: 1/sqrt(head_dim)
  bool round_bf16 = false;
  // Block-sparse form (attention_sparse/router.h): row i of head h attends only to the keys of
  // the key blocks its tile lists (softmax over those keys). Null: every key. A full list gives
  // the dense result bit for bit.
  const attention_sparse::BlockList* blocks = nullptr;
  // Only output rows [row_begin, row_end) are computed and written (row_end 0: every row); each
  // row has the bits it has in the whole call (the sparse check's dense sample).
  int64_t row_begin = 0, row_end = 0;
};

void attention_cpu(const AttentionParams& p);

}  // namespace h3rt::ops

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "formats/nvfp4_quantize_fused.h"

namespace h3rt::ops {

// GPU attention (cuda.cu). One parameter block for every kernel: the dense bf16 flash kernel and
// the 8-bit Sage kernel, which quantizes q/k/v into `workspace` first (attention_workspace_bytes
// tells the size, 0 for flash_bf16; the workspace must be zero-filled once when allocated and
// serve one stream at a time). Device pointers; strides in
// elements; head h of q starts at q + h*q_head_stride (0: head_dim), token r at
// + r*q_row_stride (0: heads*head_dim). The output is token-major: out + r*out_row_stride +
// h*out_head_stride. bf16 inputs and output, fp32 softmax and accumulation.
enum class AttentionKernel : uint8_t {
  flash_bf16 = 0,  // mma.sync bf16, online softmax (sm_80+: sm_90a, sm_121a)
  // SageAttention2 numerics (src/ops/attention_sage): int8 QK, fp8 PV; its pre-pass + the
  // automatically chosen kernel (wgmma on sm_90a). Needs q/k/v as the three column blocks of
  // one QKV buffer (attention_params_from_qkv) and a plain token-major output.
  sage_8bit = 1,
};

struct AttentionCudaParams {
  const __nv_bfloat16* q = nullptr;
  const __nv_bfloat16* k = nullptr;
  const __nv_bfloat16* v = nullptr;
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0;
  int64_t q_head_stride = 0, k_head_stride = 0, v_head_stride = 0;
  __nv_bfloat16* out = nullptr;  // must not alias q/k/v
  int64_t out_row_stride = 0, out_head_stride = 0;
  int64_t rows = 0, heads = 0, head_dim = 128;
  float scale = 0.0f;  // 0: 1/sqrt(head_dim)
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Optional NVFP4 output of the attention output (the out_proj input), both kernels: the
  // epilogue rounds O to bf16 exactly as it stores it and encodes it, bit-identical to
  // nvfp4_quantize (kIeee) of the bf16 output. qdata [rows, heads*head_dim/2] contiguous
  // (8-byte aligned), scales tiled; out may then be null (or set: both are written). Given g
  // only (a static input_scale): attention cannot be recomputed for an amax pass, so with a
  // computed g the caller keeps the unfused path (bf16 out, then nvfp4_quantize kTwoPass).
  Nvfp4Out nvfp4;
  // Block-sparse attention (sage_8bit only; flash_bf16 throws): with sparse && sparse->enabled()
  // the GPU router (attention_sparse/router_cuda.h) picks each (head, query tile)'s key blocks
  // after the pre-pass, on the device, and the Sage kernel computes only those. Rows
  // [0, sparse_prefix_rows) are the prefix; sparse_workspace holds attention_sparse_workspace_
  // bytes(); sparse_stats (optional, device [2]) gets += computed and total (head, tile, key
  // block) triples. sparse_dense_heads (optional, device [heads]): nonzero heads take every key
  // block (the sparse check's decision, h3rt/hybrid.h).
  const SparseAttention* sparse = nullptr;
  int64_t sparse_prefix_rows = 0;
  void* sparse_workspace = nullptr;
  size_t sparse_workspace_bytes = 0;
  unsigned long long* sparse_stats = nullptr;
  const uint8_t* sparse_dense_heads = nullptr;
};

// q/k/v as the three column blocks of a fused QKV projection [rows, 3, heads, 128] (the
// weights.safetensors layout); out contiguous [rows, heads*128].
AttentionCudaParams attention_params_from_qkv(const __nv_bfloat16* qkv, int64_t rows, int64_t heads,
                                              __nv_bfloat16* out);
size_t attention_workspace_bytes(const AttentionCudaParams& p, AttentionKernel kernel);
// The router's workspace for the Sage kernel this device runs (its query tile) at rows x heads.
size_t attention_sparse_workspace_bytes(int64_t rows, int64_t heads);
cudaError_t attention_cuda(const AttentionCudaParams& p, AttentionKernel kernel,
                           cudaStream_t stream);
cudaError_t attention_flash_bf16_cuda(const AttentionCudaParams& p, cudaStream_t stream);

// The query tile of the Sage kernel this device runs (192 wgmma_pp3, 64 w4): the rows one
// block-list entry covers.
int64_t attention_sparse_query_tile();

// The sparse check of one sparse Sage call (h3rt/hybrid.h SparseCheck; sparse_check.cu). Run
// right after attention_cuda(p, sage_8bit) with p.sparse, before anything rewrites p.workspace
// (the pre-pass's 8-bit q/k/v are reused) or p.out (the sparse bf16 output, which must be set).
//   1. lists: per (head, tile) count = n_kblocks for the `n_tiles` sampled tiles, 0 for the
//      others (the kernels leave those rows unwritten), index = 0, 1, ... for the sampled ones;
//   2. the Sage kernel with those lists into dense_out: the sampled rows get the bits of a
//      dense call (a full list is bit-identical to dense);
//   3. per head h, one CTA of 256 threads: thread t takes elements t, t + 256, ... of the
//      sampled rows' 128 channels (tiles in the given order, rows, channels), double sums of
//      |out - dense_out| and |dense_out|, then a fixed tree: sums[2h], sums[2h + 1]. The same
//      inputs give the same bits.
struct SparseCheckCudaParams {
  const int32_t* tiles = nullptr;      // device [n_tiles]: distinct query tiles
  int n_tiles = 0;                     // in [1, 64]
  __nv_bfloat16* dense_out = nullptr;  // [rows, heads*128]: only the sampled rows are written
  void* workspace = nullptr;           // attention_sparse_check_workspace_bytes (no initialisation)
  size_t workspace_bytes = 0;
  double* sums = nullptr;  // device [heads][2]
};
size_t attention_sparse_check_workspace_bytes(int64_t rows, int64_t heads);
cudaError_t attention_sparse_check_cuda(const AttentionCudaParams& p,
                                        const SparseCheckCudaParams& c, cudaStream_t stream);

}  // namespace h3rt::ops
#endif  // H3RT_HAVE_CUDA
