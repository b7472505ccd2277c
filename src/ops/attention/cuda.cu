// attention on the GPU (declared in attention.h): a flash-style dense bf16 kernel.
//
// Algorithm (FlashAttention-2 forward): a block owns 64 query rows of one head (4 warps x 16
// rows) and streams the keys/values in 64-row tiles through shared memory with a 2-stage
// cp.async pipeline. S = Q K^T and O += P V use mma.sync m16n8k16 (bf16 in, fp32 accumulate;
// sm_80 and later, so the same code serves sm_90a and sm_121a). The softmax is online, in the
// log2 domain (exp2 of scores pre-multiplied by scale*log2(e)); P is rounded to bf16 only as the
// operand of the second product, the row sums stay fp32. O is divided by the row sum at the end
// and written as bf16, token-major.
//
// Layout: Q/K/V rows are read through row strides and head strides, so the kernel reads
// q/k/v straight out of the fused QKV projection [S, 3, heads, 128]. Shared tiles are
// [64][128] bf16 with the 16-byte chunk index XOR-swizzled by (row & 7), which keeps both the
// cp.async stores and the ldmatrix loads free of bank conflicts. Out-of-range key rows are
// zero-filled and masked with -inf; out-of-range query rows are computed but not stored.
// Constraints: head_dim 128; strides multiples of 8 elements; pointers 16-byte aligned.
//
// NVFP4 epilogue (p.nvfp4 enabled, given g): the accumulator fragments are rounded to bf16 as
// the bf16 store does and encoded in the quad layout (nvfp4_detail::encode_head_quads).
#include <cmath>

#include "cuda/mma_sm80.cuh"
#include "cuda/runtime.h"
#include "formats/nvfp4_quantize_fused.cuh"
#include "ops/attention/attention.h"
#include "ops/attention_sage/attention_sage_cuda.h"
#include "ops/attention_sparse/router_cuda.h"

namespace h3rt::ops {

namespace {

using namespace h3rt::cuda;  // mma / cp.async primitives

using bf16 = __nv_bfloat16;

constexpr int kD = 128, kBM = 64, kBN = 64, kThreads = 128;
constexpr int kTile = kBM * kD;                       // elements per [64][128] tile
constexpr int kSmemBytes = 5 * kTile * sizeof(bf16);  // Q + 2 stages of K and V = 80 KiB

// Element offset of (row, 16-byte chunk) in a swizzled [64][128] tile.
__device__ __forceinline__ int swz(int r, int c) {
  return r * kD + ((c ^ (r & 7)) << 3);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Rows [row0, row0 + 64) of one head into a swizzled tile; rows >= rows are zero-filled.
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* base, int64_t row_stride,
                                          int64_t row0, int64_t rows) {
#pragma unroll
  for (int i = 0; i < kTile / 8 / kThreads; ++i) {
    const int idx = threadIdx.x + i * kThreads;
    const int r = idx >> 4, c = idx & 15;
    const int64_t g = row0 + r;
    const bool valid = g < rows;
    cp_async16(smem_u32(tile + swz(r, c)), base + (valid ? g : 0) * row_stride + c * 8, valid);
  }
}

template <bool kNvfp4>
__global__ void __launch_bounds__(kThreads)
    flash_attn_bf16_kernel(AttentionCudaParams p, float scale_log2) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK = sQ + kTile;      // two stages
  bf16* sV = sK + 2 * kTile;  // two stages
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t head = blockIdx.y, q0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const bf16* qb = p.q + head * p.q_head_stride;
  const bf16* kb = p.k + head * p.k_head_stride;
  const bf16* vb = p.v + head * p.v_head_stride;

  load_tile(sQ, qb, p.q_row_stride, q0, p.rows);
  load_tile(sK, kb, p.k_row_stride, 0, p.rows);
  load_tile(sV, vb, p.v_row_stride, 0, p.rows);
  cp_async_commit();

  float o[16][4];
#pragma unroll
  for (int i = 0; i < 16; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int ntiles = static_cast<int>((p.rows + kBN - 1) / kBN);

  for (int j = 0; j < ntiles; ++j) {
    const int st = j & 1;
    if (j + 1 < ntiles) {
      load_tile(sK + (st ^ 1) * kTile, kb, p.k_row_stride, int64_t(j + 1) * kBN, p.rows);
      load_tile(sV + (st ^ 1) * kTile, vb, p.v_row_stride, int64_t(j + 1) * kBN, p.rows);
    }
    cp_async_commit();   // possibly empty: keeps the group count uniform
    cp_async_wait<1>();  // everything but the prefetch just issued has landed
    __syncthreads();
    const bf16* tK = sK + st * kTile;
    const bf16* tV = sV + st * kTile;

    // S = Q K^T: this warp's 16 query rows x 64 keys (8 n-tiles of 8 keys).
    float s[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      uint32_t a[4];
      ldsm_x4(smem_u32(sQ + swz(warp * 16 + (lane & 15), 2 * kk + (lane >> 4))), a);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        ldsm_x4(smem_u32(tK + swz(np * 16 + (lane & 7) + ((lane >> 4) << 3),
                                  2 * kk + ((lane >> 3) & 1))),
                b);
        mma_bf16(s[2 * np], a, b[0], b[1]);
        mma_bf16(s[2 * np + 1], a, b[2], b[3]);
      }
    }

    // Online softmax. Thread holds rows (lane>>2) and (lane>>2)+8 of the warp's 16, columns
    // nt*8 + (lane&3)*2 + {0,1}; a row is spread over the 4 lanes of a quad.
    const int64_t kv0 = int64_t(j) * kBN;
    const bool partial = kv0 + kBN > p.rows;
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = s[nt][e] * scale_log2;
        if (partial && kv0 + nt * 8 + (lane & 3) * 2 + (e & 1) >= p.rows) v = -INFINITY;
        s[nt][e] = v;
        mx[e >> 1] = fmaxf(mx[e >> 1], v);
      }
    }
    float alpha[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
      alpha[i] = exp2f(m[i] - mx[i]);  // m = -inf on the first tile: alpha = 0
      m[i] = mx[i];
      l[i] *= alpha[i];
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - mx[e >> 1]);
        l[e >> 1] += s[nt][e];
      }
    }
#pragma unroll
    for (int dt = 0; dt < 16; ++dt) {
      o[dt][0] *= alpha[0];
      o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1];
      o[dt][3] *= alpha[1];
    }

    // O += P V: P's accumulator layout is the A-operand layout of the next mma (k = keys).
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const uint32_t a[4] = {pack_bf16(s[2 * ks][0], s[2 * ks][1]),
                             pack_bf16(s[2 * ks][2], s[2 * ks][3]),
                             pack_bf16(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                             pack_bf16(s[2 * ks + 1][2], s[2 * ks + 1][3])};
#pragma unroll
      for (int dp = 0; dp < 8; ++dp) {
        uint32_t b[4];
        ldsm_x4_t(smem_u32(tV + swz(ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                    2 * dp + (lane >> 4))),
                  b);
        mma_bf16(o[2 * dp], a, b[0], b[1]);
        mma_bf16(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites this stage
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    l[i] = 1.0f / l[i];
  }
  bf16* ob = p.out + head * p.out_head_stride;
  const int64_t r0 = q0 + warp * 16 + (lane >> 2), r1 = r0 + 8;
  if constexpr (kNvfp4) {
    // The same roundings as the bf16 store below; the bf16 is written too when p.out is set.
    const auto word = [&](int dt, int i) {
      const uint32_t v = pack_bf16(o[dt][2 * i] * l[i], o[dt][2 * i + 1] * l[i]);
      const int64_t r = i == 0 ? r0 : r1;
      if (p.out && r < p.rows)
        *reinterpret_cast<uint32_t*>(ob + r * p.out_row_stride + dt * 8 + (lane & 3) * 2) = v;
      return v;
    };
    using namespace nvfp4_detail;
    encode_head_quads(p.nvfp4, *p.nvfp4.global_scale, p.rows, p.heads * kD, head, r0, word);
    fused_scale_padding(p.nvfp4, p.rows, p.heads * kD);
  } else {
#pragma unroll
    for (int dt = 0; dt < 16; ++dt) {
      const int col = dt * 8 + (lane & 3) * 2;
      if (r0 < p.rows)
        *reinterpret_cast<__nv_bfloat162*>(ob + r0 * p.out_row_stride + col) =
            __floats2bfloat162_rn(o[dt][0] * l[0], o[dt][1] * l[0]);
      if (r1 < p.rows)
        *reinterpret_cast<__nv_bfloat162*>(ob + r1 * p.out_row_stride + col) =
            __floats2bfloat162_rn(o[dt][2] * l[1], o[dt][3] * l[1]);
    }
  }
}

// An enabled NVFP4 output of either kernel: valid for the [rows, heads * head_dim] output, with a
// given g (the epilogue cannot be re-run for an amax pass). Throws naming `op`.
void check_attention_nvfp4(const AttentionCudaParams& p, const char* op) {
  if (!p.nvfp4.enabled()) return;
  check_nvfp4_out(p.nvfp4, op, p.heads * p.head_dim, 8);
  H3RT_CHECK(!p.nvfp4.computed(), op, ": the fused NVFP4 epilogue needs a given global scale; ",
             "with a computed one write bf16 and run nvfp4_quantize");
}

AttentionCudaParams normalized(const AttentionCudaParams& in) {
  AttentionCudaParams p = in;
  const int64_t span = p.heads * p.head_dim;
  if (!p.q_row_stride) p.q_row_stride = span;
  if (!p.k_row_stride) p.k_row_stride = span;
  if (!p.v_row_stride) p.v_row_stride = span;
  if (!p.out_row_stride) p.out_row_stride = span;
  if (!p.q_head_stride) p.q_head_stride = p.head_dim;
  if (!p.k_head_stride) p.k_head_stride = p.head_dim;
  if (!p.v_head_stride) p.v_head_stride = p.head_dim;
  if (!p.out_head_stride) p.out_head_stride = p.head_dim;
  if (p.scale == 0.0f) p.scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  return p;
}

// The router's shape for the Sage kernel this device runs (its query tile).
attention_sparse::RouterShape sparse_shape(int64_t rows, int64_t heads, int64_t prefix_rows) {
  const auto v = attention_sage::sage_resolve_variant(attention_sage::SageVariant::automatic);
  return {rows, heads, kD, attention_sage::sage_query_tile(v), prefix_rows};
}

}  // namespace

AttentionCudaParams attention_params_from_qkv(const __nv_bfloat16* qkv, int64_t rows, int64_t heads,
                                              __nv_bfloat16* out) {
  AttentionCudaParams p;
  const int64_t span = heads * 128;
  p.q = qkv;
  p.k = qkv + span;
  p.v = qkv + 2 * span;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = 3 * span;
  p.out = out;
  p.out_row_stride = span;
  p.rows = rows;
  p.heads = heads;
  p.head_dim = 128;
  return p;
}

int64_t attention_sparse_query_tile() {
  return sparse_shape(1, 1, 0).q_tile;
}

size_t attention_sparse_workspace_bytes(int64_t rows, int64_t heads) {
  return attention_sparse::router_workspace_bytes(sparse_shape(rows, heads, 0));
}

size_t attention_workspace_bytes(const AttentionCudaParams& p, AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::flash_bf16:
      return 0;
    case AttentionKernel::sage_8bit:
      return attention_sage::sage_buffer_bytes(p.rows, p.heads);
  }
  return 0;
}

namespace {

// The router on the bf16 q/k columns; returns the block lists it writes.
attention_sparse::BlockList route(const AttentionCudaParams& p, cudaStream_t stream) {
  attention_sparse::RouterCudaParams r;
  r.q = p.q;
  r.k = p.k;
  r.q_row_stride = p.q_row_stride;
  r.k_row_stride = p.k_row_stride;
  r.shape = sparse_shape(p.rows, p.heads, p.sparse_prefix_rows);
  r.cfg = *p.sparse;
  r.workspace = p.sparse_workspace;
  r.workspace_bytes = p.sparse_workspace_bytes;
  r.stats = p.sparse_stats;
  r.dense_heads = p.sparse_dense_heads;
  H3RT_CUDA_CHECK(attention_sparse::route_cuda(r, stream));
  return attention_sparse::router_lists(p.sparse_workspace, r.shape);
}

// The Sage pre-pass and kernel on q/k/v that are the column blocks of one QKV buffer.
cudaError_t attention_sage_cuda(const AttentionCudaParams& in, cudaStream_t stream) {
  const AttentionCudaParams p = normalized(in);
  const int64_t span = p.heads * p.head_dim;
  H3RT_CHECK(p.head_dim == kD && p.k == p.q + span && p.v == p.q + 2 * span &&
                 p.k_row_stride == p.q_row_stride && p.v_row_stride == p.q_row_stride &&
                 p.q_head_stride == kD && p.k_head_stride == kD && p.v_head_stride == kD &&
                 p.out_head_stride == kD,
             "attention_cuda (sage_8bit): q/k/v must be the column blocks of one QKV buffer "
             "[rows, 3, heads, 128] and the output token-major");
  H3RT_CHECK(p.out || p.nvfp4.enabled(),
             "attention_cuda (sage_8bit): no output (out and nvfp4 both unset)");
  check_attention_nvfp4(p, "attention_cuda (sage_8bit)");
  const size_t need = attention_workspace_bytes(p, AttentionKernel::sage_8bit);
  H3RT_CHECK(p.workspace && p.workspace_bytes >= need, "attention_cuda (sage_8bit): workspace of ",
             p.workspace_bytes, " bytes, needs ", need);
  if (p.rows == 0) return cudaSuccess;
  attention_sage::SagePrepassParams pre;
  pre.qkv = p.q;
  pre.row_stride = p.q_row_stride;
  pre.seq = p.rows;
  pre.heads = p.heads;
  pre.sm_scale = p.scale;
  pre.buf = attention_sage::sage_buffers(p.workspace, p.rows, p.heads);
  cudaError_t e = attention_sage::sage_prepass(pre, stream);
  if (e != cudaSuccess) return e;
  attention_sage::SageAttentionParams a;
  a.buf = pre.buf;
  a.seq = p.rows;
  a.heads = p.heads;
  a.out = p.out;
  a.out_row_stride = p.out_row_stride;
  a.nvfp4 = p.nvfp4;
  if (p.sparse && p.sparse->enabled()) a.blocks = route(p, stream);
  return attention_sage::sage_attention(a, stream);
}

}  // namespace

cudaError_t attention_flash_bf16_cuda(const AttentionCudaParams& in, cudaStream_t stream) {
  const AttentionCudaParams p = normalized(in);
  const bool nvfp4 = p.nvfp4.enabled();
  H3RT_CHECK(p.q && p.k && p.v && (p.out || nvfp4) && p.rows >= 0 && p.heads > 0,
             "attention_flash_bf16_cuda: bad params");
  check_attention_nvfp4(p, "attention_flash_bf16_cuda");
  H3RT_CHECK(p.head_dim == kD, "attention_flash_bf16_cuda: head_dim ", p.head_dim,
             " (only 128 is implemented)");
  H3RT_CHECK(p.q_row_stride % 8 == 0 && p.k_row_stride % 8 == 0 && p.v_row_stride % 8 == 0 &&
                 p.out_row_stride % 2 == 0 && p.q_head_stride % 8 == 0 &&
                 p.k_head_stride % 8 == 0 && p.v_head_stride % 8 == 0 && p.out_head_stride % 2 == 0,
             "attention_flash_bf16_cuda: q/k/v strides must be multiples of 8 elements, out "
             "strides even");
  H3RT_CHECK(cuda::aligned16(p.q) && cuda::aligned16(p.k) && cuda::aligned16(p.v) &&
                 (reinterpret_cast<uintptr_t>(p.out) & 3u) == 0,
             "attention_flash_bf16_cuda: q/k/v must be 16-byte aligned, out 4-byte aligned");
  H3RT_CHECK(p.heads <= 65535, "attention_flash_bf16_cuda: at most 65535 heads");
  if (p.rows == 0) return cudaSuccess;
  const int cc = cuda::current_device_cc();
  H3RT_CHECK(cc >= 80 && cuda::compiled_arch_supports(cc / 10, cc % 10) != 0,
             "attention_flash_bf16_cuda: no compiled arch runs on this device (sm_", cc,
             "); build with it in H3RT_CUDA_ARCHS");
  auto* kernel = nvfp4 ? flash_attn_bf16_kernel<true> : flash_attn_bf16_kernel<false>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>((p.rows + kBM - 1) / kBM), static_cast<unsigned>(p.heads));
  const float scale_log2 = p.scale * 1.4426950408889634f;
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(p, scale_log2);
  return H3RT_LAUNCH_CHECK("flash_attn_bf16");
}

cudaError_t attention_cuda(const AttentionCudaParams& p, AttentionKernel kernel,
                           cudaStream_t stream) {
  H3RT_CHECK(kernel == AttentionKernel::sage_8bit || !p.sparse || !p.sparse->enabled(),
             "sparse attention needs --attention sage (the bf16 attention kernel has no "
             "block-sparse form)");
  switch (kernel) {
    case AttentionKernel::flash_bf16:
      return attention_flash_bf16_cuda(p, stream);
    case AttentionKernel::sage_8bit:
      return attention_sage_cuda(p, stream);
  }
  H3RT_FAIL("attention_cuda: unknown kernel ", static_cast<int>(kernel));
}

}  // namespace h3rt::ops
