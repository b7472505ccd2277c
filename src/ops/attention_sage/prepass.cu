// Quantization pre-pass of the Sage attention op. Two implementations (SagePrepassAlgo):
//  fused_l2 (prepass_fused.cu): one persistent launch; K and V are re-read from L2.
//  two_launch (this file): no copies of Q/K/V,
//   stats_kernel    grid (Sp/128, H), 128 threads: Q -> int8 (8 scales per 16 rows), partial K
//                   sums (fixed order) and V channel maxima for this 128-token chunk; the last
//                   chunk of a head (atomic ticket) reduces the partials in chunk order.
//   quantize_kernel grid (Sp/128, H), 128 threads, 32 KB smem tile: K - mean -> int8 (4 scales
//                   per 128 keys), V -> e4m3 with channel scales, written transposed [d][t].
// Every fp32 operation uses explicit _rn intrinsics so the results match the CPU reference
// (cpu.cpp) bit for bit. Inputs must be 16-byte aligned (row_stride % 8 == 0).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "ops/attention_sage/attention_sage.h"
#include "ops/attention_sage/attention_sage_cuda.h"
#include "ops/attention_sage/prepass_common.cuh"

namespace h3rt::attention_sage {
namespace {

using prepass::bf16f;
using prepass::dev_int8_scale;
using prepass::dev_pack_i8;
using prepass::Dims;
using prepass::head_k_mean;
using prepass::head_v_scale;
using prepass::kD;
using prepass::token_of_slot;
using prepass::unpack8;
using prepass::warp_max;

constexpr int kThreads = 128;

__device__ __forceinline__ const uint16_t* qkv_at(const uint16_t* qkv, const Dims& n, int part,
                                                  int64_t t, int64_t h, int d) {
  return qkv + t * n.row_stride + (part * n.heads + h) * kD + d;
}

// Q of one 128-row chunk: warp handles groups {rows 16b+g, 16b+g+8}; lane = (row, 8 columns).
__device__ void quantize_q_chunk(const uint16_t* qkv, const Dims& n, int64_t c, int64_t h,
                                 float qk_log2, const SageBuffers& buf) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int grp = warp; grp < 64; grp += kThreads / 32) {
    int blk = grp / 8, g = grp % 8;
    int64_t t = c * kTokenPad + blk * kQWarpRows + g + (lane >= 16 ? 8 : 0);
    int col = (lane % 16) * 8;
    uint4 w = make_uint4(0, 0, 0, 0);
    if (t < n.seq) w = *reinterpret_cast<const uint4*>(qkv_at(qkv, n, 0, t, h, col));
    float f[8];
    unpack8(w, f);
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
    const float scale = dev_int8_scale(warp_max(amax)), inv = __frcp_rn(scale);
    const uint32_t lo = dev_pack_i8(f[0], f[1], f[2], f[3], inv);
    const uint32_t hi = dev_pack_i8(f[4], f[5], f[6], f[7], inv);
    *reinterpret_cast<uint2*>(buf.q8 + (h * n.padded + t) * kD + col) = make_uint2(lo, hi);
    if (lane == 0)
      buf.q_scale[h * (n.padded / kQWarpRows * 8) + (c * 8 + blk) * 8 + g] =
          __fmul_rn(scale, qk_log2);
  }
}

// Partial K sums and V maxima of one chunk. Thread = (token residue r, 8 channels).
__device__ void chunk_stats(const uint16_t* qkv, const Dims& n, int64_t c, int64_t h,
                            const SageBuffers& buf, float (*sums)[kD], float (*vmax)[kD]) {
  const int r = threadIdx.x / 16, col = (threadIdx.x % 16) * 8;
  float sub[8] = {}, vm[8] = {};
#pragma unroll 4
  for (int j = 0; j < 16; ++j) {
    int64_t t = c * kTokenPad + 8 * j + r;
    if (t >= n.seq) break;
    float k[8], v[8];
    unpack8(*reinterpret_cast<const uint4*>(qkv_at(qkv, n, 1, t, h, col)), k);
    unpack8(*reinterpret_cast<const uint4*>(qkv_at(qkv, n, 2, t, h, col)), v);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      sub[i] = __fadd_rn(sub[i], k[i]);
      vm[i] = fmaxf(vm[i], fabsf(v[i]));
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    sums[r][col + i] = sub[i];
    vmax[r][col + i] = vm[i];
  }
  __syncthreads();
  const int d = threadIdx.x;
  float chunk = 0.0f, vmx = 0.0f;
  for (int rr = 0; rr < 8; ++rr) {
    chunk = __fadd_rn(chunk, sums[rr][d]);
    vmx = fmaxf(vmx, vmax[rr][d]);
  }
  buf.k_partial[(c * n.heads + h) * kD + d] = chunk;
  buf.v_partial[(c * n.heads + h) * kD + d] = vmx;
}

// The last chunk of a head: reduce all partials in chunk order (L2 reads, 16 chunks in flight).
// Thread d (0..127) = channel d.
__device__ __forceinline__ void finish_head(const Dims& n, int64_t h, const SageBuffers& buf,
                                            int d) {
  constexpr int kBatch = 16;
  const int64_t chunks = n.padded / kTokenPad;
  float total = 0.0f, vmx = 0.0f;
  for (int64_t c0 = 0; c0 < chunks; c0 += kBatch) {
    float kb[kBatch], vb[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      int64_t idx = ((c0 + i) * n.heads + h) * kD + d;
      kb[i] = c0 + i < chunks ? __ldcg(buf.k_partial + idx) : 0.0f;
      vb[i] = c0 + i < chunks ? __ldcg(buf.v_partial + idx) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      if (c0 + i < chunks) total = __fadd_rn(total, kb[i]);
      vmx = fmaxf(vmx, vb[i]);
    }
  }
  buf.k_mean[h * kD + d] = head_k_mean(total, n);
  buf.v_scale[h * kD + d] = head_v_scale(vmx);
}

// K of one chunk from a bf16 tile [128 rows][128] (rows past S ignored): warp g (0..3 = warps
// 0..3 of the block) = scale group (keys 8j + 2g + {0,1}); lane = 4 channels.
__device__ __forceinline__ void quantize_k_chunk(const Dims& n, int64_t c, int64_t h,
                                                 const uint16_t* tile, const SageBuffers& buf) {
  const int g = threadIdx.x / 32, lane = threadIdx.x % 32;
  float mean[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) mean[i] = buf.k_mean[h * kD + lane * 4 + i];
  auto smooth = [&](int row, float* x) {
    uint2 w = *reinterpret_cast<const uint2*>(tile + row * kD + lane * 4);
    x[0] = __fsub_rn(bf16f(w.x & 0xffffu), mean[0]);
    x[1] = __fsub_rn(bf16f(w.x >> 16), mean[1]);
    x[2] = __fsub_rn(bf16f(w.y & 0xffffu), mean[2]);
    x[3] = __fsub_rn(bf16f(w.y >> 16), mean[3]);
  };
  float amax = 0.0f;
#pragma unroll 8
  for (int k = 0; k < 32; ++k) {
    int row = 8 * (k / 2) + 2 * g + k % 2;
    if (c * kTokenPad + row >= n.seq) continue;
    float x[4];
    smooth(row, x);
#pragma unroll
    for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(x[i]));
  }
  const float scale = dev_int8_scale(warp_max(amax)), inv = __frcp_rn(scale);
  if (lane == 0) buf.k_scale[h * (n.padded / kKBlock * 4) + c * 4 + g] = scale;
#pragma unroll 8
  for (int k = 0; k < 32; ++k) {
    int row = 8 * (k / 2) + 2 * g + k % 2;
    int64_t t = c * kTokenPad + row;
    uint32_t packed = 0;
    if (t < n.seq) {
      float x[4];
      smooth(row, x);
      packed = dev_pack_i8(x[0], x[1], x[2], x[3], inv);
    }
    *reinterpret_cast<uint32_t*>(buf.k8 + (h * n.padded + t) * kD + lane * 4) = packed;
  }
}

// V of one chunk: thread = channel d; 16-byte stores of 16 permuted tokens.
__device__ __forceinline__ void quantize_v_chunk(const Dims& n, int64_t c, int64_t h,
                                                 const uint16_t* tile, const SageBuffers& buf,
                                                 int d) {
  const float inv = __frcp_rn(buf.v_scale[h * kD + d]);
  uint8_t* dst = buf.v8t + (h * kD + d) * n.padded + c * kTokenPad;
  for (int grp = 0; grp < kTokenPad / 16; ++grp) {
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int p = 0; p < 16; ++p) {
      int row = grp * 16 + token_of_slot(p);
      if (c * kTokenPad + row >= n.seq) continue;
      float v = bf16f(tile[row * kD + d]);
      uint32_t b = __nv_cvt_float_to_fp8(__fmul_rn(v, inv), __NV_SATFINITE, __NV_E4M3);
      w[p / 4] |= b << (8 * (p % 4));
    }
    *reinterpret_cast<uint4*>(dst + grp * 16) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

__global__ void __launch_bounds__(kThreads)
    stats_kernel(const uint16_t* qkv, Dims n, float qk_log2, SageBuffers buf) {
  __shared__ float sums[8][kD], vmax[8][kD];
  __shared__ bool last;
  const int64_t c = blockIdx.x, h = blockIdx.y;
  quantize_q_chunk(qkv, n, c, h, qk_log2, buf);
  chunk_stats(qkv, n, c, h, buf, sums, vmax);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(buf.tickets + h, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  finish_head(n, h, buf, threadIdx.x);
  if (threadIdx.x == 0) buf.tickets[h] = 0;  // ready for the next call
}

__device__ void load_tile(const uint16_t* qkv, const Dims& n, int part, int64_t c, int64_t h,
                          uint16_t* tile) {
  for (int i = threadIdx.x; i < kTokenPad * kD / 8; i += kThreads) {
    int row = i / (kD / 8), col = (i % (kD / 8)) * 8;
    int64_t t = c * kTokenPad + row;
    uint4 w = make_uint4(0, 0, 0, 0);
    if (t < n.seq) w = *reinterpret_cast<const uint4*>(qkv_at(qkv, n, part, t, h, col));
    *reinterpret_cast<uint4*>(tile + row * kD + col) = w;
  }
}

__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const uint16_t* qkv, Dims n, SageBuffers buf) {
  __shared__ uint4 smem_raw[kTokenPad * kD / 8];  // 32 KB bf16 tile
  uint16_t* tile = reinterpret_cast<uint16_t*>(smem_raw);
  const int64_t c = blockIdx.x, h = blockIdx.y;
  load_tile(qkv, n, 1, c, h, tile);
  __syncthreads();
  quantize_k_chunk(n, c, h, tile, buf);
  __syncthreads();
  load_tile(qkv, n, 2, c, h, tile);
  __syncthreads();
  quantize_v_chunk(n, c, h, tile, buf, threadIdx.x);
}

size_t align256(size_t x) {
  return (x + 255) / 256 * 256;
}

}  // namespace

size_t sage_buffer_bytes(int64_t seq, int64_t heads) {
  SageBuffers b = sage_buffers(nullptr, seq, heads);
  return reinterpret_cast<size_t>(b.head_consts) + align256(heads * 2 * kD * sizeof(uint64_t));
}

SageBuffers sage_buffers(void* base, int64_t seq, int64_t heads) {
  const int64_t sp = padded_len(seq), chunks = sp / kTokenPad;
  char* p = static_cast<char*>(base);
  auto take = [&](size_t bytes) {
    char* r = p;
    p += align256(bytes);
    return r;
  };
  SageBuffers b;
  b.q8 = reinterpret_cast<int8_t*>(take(heads * sp * kD));
  b.k8 = reinterpret_cast<int8_t*>(take(heads * sp * kD));
  b.v8t = reinterpret_cast<uint8_t*>(take(heads * sp * kD));
  b.q_scale = reinterpret_cast<float*>(take(heads * q_scales_per_head(seq) * 4));
  b.k_scale = reinterpret_cast<float*>(take(heads * k_scales_per_head(seq) * 4));
  b.v_scale = reinterpret_cast<float*>(take(heads * kD * 4));
  b.k_mean = reinterpret_cast<float*>(take(heads * kD * 4));
  b.k_partial = reinterpret_cast<float*>(take(chunks * heads * kD * 4));
  b.v_partial = reinterpret_cast<float*>(take(chunks * heads * kD * 4));
  b.tickets = reinterpret_cast<unsigned*>(take((heads * (kD + 1) + 3) * sizeof(unsigned)));
  b.head_consts = reinterpret_cast<uint64_t*>(take(heads * 2 * kD * sizeof(uint64_t)));
  return b;
}

const char* sage_prepass_algo_name(SagePrepassAlgo a) {
  switch (a) {
    case SagePrepassAlgo::automatic:
      return "automatic";
    case SagePrepassAlgo::two_launch:
      return "two_launch";
    case SagePrepassAlgo::fused_l2:
      return "fused_l2";
  }
  return "?";
}

cudaError_t sage_prepass(const SagePrepassParams& p, cudaStream_t stream) {
  if (p.qkv == nullptr || p.seq <= 0 || p.heads <= 0 || p.heads > 65535 ||
      p.row_stride < 3 * p.heads * kD || p.row_stride % 8 != 0 ||
      reinterpret_cast<uintptr_t>(p.qkv) % 16 != 0 || p.buf.q8 == nullptr)
    return cudaErrorInvalidValue;
  Dims n{p.seq, p.heads, padded_len(p.seq), p.row_stride};
  const auto* qkv = static_cast<const uint16_t*>(p.qkv);
  const float qk_log2 = qk_scale_log2(p.sm_scale);
  // automatic: the fused kernel (the faster one on the H200, see attention_sage_cuda.h), or the
  // two launches where it cannot run.
  if (p.algo == SagePrepassAlgo::fused_l2 || p.algo == SagePrepassAlgo::automatic) {
    const cudaError_t e = prepass::launch_fused(qkv, n, qk_log2, p.buf, stream);
    if (p.algo == SagePrepassAlgo::fused_l2 || e != cudaErrorNotSupported) return e;
  }
  dim3 grid(static_cast<unsigned>(n.padded / kTokenPad), static_cast<unsigned>(p.heads));
  stats_kernel<<<grid, kThreads, 0, stream>>>(qkv, n, qk_log2, p.buf);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  quantize_kernel<<<grid, kThreads, 0, stream>>>(qkv, n, p.buf);
  return cudaGetLastError();
}

}  // namespace h3rt::attention_sage
