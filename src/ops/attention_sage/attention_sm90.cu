// Sage attention kernel for sm_90a (and the Blackwell-consumer sm_120a / sm_121a builds, where
// the same mma.sync instructions exist; those cannot be run on the H200 used for testing).
//
// Algorithm (numerics: attention_sage.h): CTA = 64 query rows of one head (4 warps, 16 rows
// each; the w4 variant), loops over KV blocks of kBlockN = 128 keys with a 2-stage cp.async
// pipeline: every block, or (block-sparse form) the blocks of the CTA's list in list order,
// each computed exactly as in the dense loop (a full list gives the dense output bit for bit).
//   S = Q8 K8^T : mma.sync m16n8k32 s8 -> s32, Q fragments held in registers.
//   online softmax in base 2 (ex2.approx) straight to 448*p, as the wgmma kernel: the row maximum
//   on the integers, the scores' conversion and scaling in one FFMA, P -> e4m3; the denominator
//   is the row sum of P8 (RowSum::p8), from one more mma per 32 keys against e4m3 ones.
//   O_blk = P8 V8 : mma.sync m16n8k32 e4m3 -> f32 into a fresh per-block accumulator that is
//   then added into the running fp32 O (two-level accumulation).
// Layouts: Q8/K8 [H][Sp][128] int8; V8 [H][128][Sp] e4m3 with tokens permuted in groups of 16 so
// the P accumulator fragment is directly the A operand of the PV mma. Shared-memory tiles use an
// XOR swizzle of 16-byte chunks so ldmatrix is conflict free.
// Output bf16 [S][out_row_stride] and/or NVFP4 (SageAttentionParams::nvfp4); padded keys (>= S)
// are masked, padded rows not written.
// What bounds it on a GB10 (sm_121; an expectation from public specifications, never measured:
// bench/RESULTS.md, session 16): one exp2 per 512 MMA operations at head dim 128; GB10's 48 SMs
// deliver ~2048 int8/fp8 MMA operations per clock each (~250 TOPS dense) against 16 MUFU exp2,
// so at the MMA peak the MUFU is ~25% busy (on Hopper's wgmma, 8192 per clock, it is 100%). The
// kernel is tensor-bound there: moving exp2 to the FMA pipe cannot help; feeding mma.sync
// (ldmatrix, cp.async depth, register tiles) is what counts.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <climits>
#include <cstring>
#include <string>

#include "cuda/mma_sm80.cuh"
#include "cuda/runtime.h"
#include "ops/attention_sage/attention_sage.h"
#include "ops/attention_sage/attention_sage_cuda.h"
#include "ops/attention_sage/sage_device.cuh"

#if defined(__CUDA_ARCH__) && \
    (__CUDA_ARCH__ == 900 || __CUDA_ARCH__ == 1200 || __CUDA_ARCH__ == 1210)
#define H3RT_SAGE_KERNEL_ENABLED 1
#endif

namespace h3rt::attention_sage {
namespace {

using namespace h3rt::cuda;  // mma / cp.async primitives

constexpr int kD = kHeadDim;
constexpr int kStages = 2;

template <int W>
struct Cfg {
  static constexpr int kThreads = 32 * W;
  static constexpr int kRows = 16 * W;
  static constexpr int kQBytes = kRows * kD;
  static constexpr int kKBytes = kBlockN * kD;
  static constexpr int kVBytes = kD * kBlockN;
  static constexpr int kSmem = kQBytes + kStages * (kKBytes + kVBytes);
};

struct KernelArgs {
  const int8_t* q8;
  const int8_t* k8;
  const uint8_t* v8t;
  const float* q_scale;
  const float* k_scale;
  const float* v_scale;
  __nv_bfloat16* out;  // null: NVFP4 output only
  int64_t out_stride;
  int seq, padded, heads;
  Nvfp4Out nvfp4;                      // optional NVFP4 encoding of the output (given g)
  attention_sparse::BlockList blocks;  // kSparse: the key blocks of each (head, query tile)
};

#ifdef H3RT_SAGE_KERNEL_ENABLED

using device::ex2;
using device::pack_e4m3;

constexpr float kLog2PScale = 8.807354922057604f;  // log2(448): P is exponentiated to 448 p
constexpr uint32_t kE4m3Ones = 0x38383838u;        // four e4m3 1.0

// Swizzled byte offset in a tile of 128-byte rows (Q, K and the V^T tile of 128 keys).
__device__ __forceinline__ uint32_t off128(int row, int chunk) {
  return row * 128 + ((chunk ^ (row & 7)) << 4);
}
static_assert(kBlockN == 128, "tiles assume 128-byte K and V^T rows");

template <int W>
__device__ __forceinline__ void load_q(const KernelArgs& a, int h, int q0, uint32_t s_q) {
  const int8_t* src = a.q8 + (static_cast<int64_t>(h) * a.padded + q0) * kD;
  for (int i = threadIdx.x; i < Cfg<W>::kRows * 8; i += Cfg<W>::kThreads)
    cp_async16(s_q + off128(i / 8, i % 8), src + i * 16);
}

template <int W>
__device__ __forceinline__ void load_kv(const KernelArgs& a, int h, int kv0, uint32_t s_k,
                                        uint32_t s_v) {
  const int8_t* ks = a.k8 + (static_cast<int64_t>(h) * a.padded + kv0) * kD;
  for (int i = threadIdx.x; i < kBlockN * 8; i += Cfg<W>::kThreads)
    cp_async16(s_k + off128(i / 8, i % 8), ks + i * 16);
  const uint8_t* vs = a.v8t + static_cast<int64_t>(h) * kD * a.padded + kv0;
  for (int i = threadIdx.x; i < kD * (kBlockN / 16); i += Cfg<W>::kThreads) {
    int row = i / (kBlockN / 16), chunk = i % (kBlockN / 16);
    cp_async16(s_v + off128(row, chunk), vs + static_cast<int64_t>(row) * a.padded + chunk * 16);
  }
}

// S = Q K^T for one warp: 16 rows x 128 keys, int32.
__device__ __forceinline__ void qk_block(const uint32_t (&qf)[4][4], uint32_t s_k, int lane,
                                         int (&acc)[16][4]) {
#pragma unroll
  for (int n = 0; n < 16; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[n][i] = 0;
  const int mat = lane / 8;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int np = 0; np < 8; ++np) {
      uint32_t b[4];
      ldsm_x4(s_k + off128((2 * np + mat / 2) * 8 + lane % 8, 2 * kk + mat % 2), b);
      mma_s8(acc[2 * np], qf[kk], b[0], b[1]);
      mma_s8(acc[2 * np + 1], qf[kk], b[2], b[3]);
    }
  }
}

// One key block's softmax, as the wgmma kernel computes it (softmax_block_as in
// attention_wgmma_sm90.cu): the row maximum on the integers (3-input max), then 448 p =
// exp2(a dq - (m - log2(448))) as one FFMA on the integer's bits against C = 1.5 * 2^23 dq +
// m - log2(448) rounded up, packed to the P8 fragments pa (the A operand of the PV mma), and
// their row sums lb (RowSum::p8) from one more mma against e4m3 ones (every column of lb holds
// its row's sum). kTail: the block reaches past seq (masked keys give p = 0); the masking is
// compiled into that form only, as in the wgmma kernel, whose dense form measured 21% slower
// without the split.
template <bool kTail>
__device__ __forceinline__ void softmax_block(const int (&acc)[16][4], float dq, int kv0, int seq,
                                              int lane, float (&m)[2], float (&alpha)[2],
                                              uint32_t (&pa)[4][4], float (&lb)[4]) {
  const auto masked = [&](int n, int i) {
    return kTail && kv0 + n * 8 + (lane % 4) * 2 + (i % 2) >= seq;
  };
  int imax[2] = {INT_MIN, INT_MIN};
#pragma unroll
  for (int n = 0; n < 16; ++n)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      imax[r] = __vimax3_s32(imax[r], masked(n, 2 * r) ? INT_MIN : acc[n][2 * r],
                             masked(n, 2 * r + 1) ? INT_MIN : acc[n][2 * r + 1]);
  float negc[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // A thread whose keys are all masked holds INT_MIN * dq, below the row's maximum (key kv0
    // is valid and belongs to the thread with lane % 4 == 0).
    float mx = static_cast<float>(imax[r]) * dq;
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[r], mx);
    alpha[r] = ex2(m[r] - m_new);
    m[r] = m_new;
    negc[r] = -__fmaf_ru(12582912.0f, dq, m_new - kLog2PScale);
  }
  float s[16][4];
#pragma unroll
  for (int n = 0; n < 16; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float bits = __int_as_float(acc[n][i] + 0x4B400000);
      s[n][i] = ex2(masked(n, i) ? -INFINITY : fmaf(bits, dq, negc[i / 2]));
    }
#pragma unroll
  for (int k2 = 0; k2 < 4; ++k2) {
    const int n0 = 4 * k2;
    pa[k2][0] = pack_e4m3(s[n0][0], s[n0][1], s[n0 + 1][0], s[n0 + 1][1]);
    pa[k2][1] = pack_e4m3(s[n0][2], s[n0][3], s[n0 + 1][2], s[n0 + 1][3]);
    pa[k2][2] = pack_e4m3(s[n0 + 2][0], s[n0 + 2][1], s[n0 + 3][0], s[n0 + 3][1]);
    pa[k2][3] = pack_e4m3(s[n0 + 2][2], s[n0 + 2][3], s[n0 + 3][2], s[n0 + 3][3]);
    mma_e4m3(lb, pa[k2], kE4m3Ones, kE4m3Ones);
  }
}

template <int W, bool kNvfp4, bool kSparse>
__global__ void __launch_bounds__(Cfg<W>::kThreads) sage_attn_kernel(KernelArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = blockIdx.y, q0 = blockIdx.x * Cfg<W>::kRows;
  const uint32_t s_q = smem_u32(smem);
  auto s_k = [&](int st) {
    return s_q + Cfg<W>::kQBytes + st * (Cfg<W>::kKBytes + Cfg<W>::kVBytes);
  };
  auto s_v = [&](int st) { return s_k(st) + Cfg<W>::kKBytes; };

  int nblocks = (a.seq + kBlockN - 1) / kBlockN;
  const int32_t* list = nullptr;  // kSparse: the CTA's ascending key blocks
  if constexpr (kSparse) {
    const int64_t tile = static_cast<int64_t>(h) * a.blocks.n_qtiles + blockIdx.x;
    list = a.blocks.index + tile * a.blocks.n_kblocks;
    nblocks = __ldg(a.blocks.count + tile);
    if (nblocks <= 0) {      // an empty list (not made by the router): rows left unwritten,
      if constexpr (kNvfp4)  // this CTA's share of the NVFP4 scale padding still zeroed
        nvfp4_detail::fused_scale_padding(a.nvfp4, a.seq, static_cast<int64_t>(a.heads) * 128);
      return;
    }
  }
  const auto key_block = [&](int b) { return kSparse ? __ldg(list + b) : b; };
  load_q<W>(a, h, q0, s_q);
  load_kv<W>(a, h, key_block(0) * kBlockN, s_k(0), s_v(0));
  cp_async_commit();

  const float qs = a.q_scale[static_cast<int64_t>(h) * (a.padded / kQWarpRows * 8) +
                             (q0 / kQWarpRows + warp) * 8 + lane / 4];
  const float* kscale = a.k_scale + static_cast<int64_t>(h) * (a.padded / kKBlock * 4) + lane % 4;
  uint32_t qf[4][4];
  float o[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[j][i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int mat = lane / 8;

  for (int b = 0; b < nblocks; ++b) {
    const int kv0 = key_block(b) * kBlockN, st = b % kStages;
    if (b + 1 < nblocks)
      load_kv<W>(a, h, key_block(b + 1) * kBlockN, s_k((b + 1) % kStages), s_v((b + 1) % kStages));
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (b == 0) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        ldsm_x4(s_q + off128(warp * 16 + (mat % 2) * 8 + lane % 8, 2 * kk + mat / 2), qf[kk]);
    }
    int acc[16][4];
    qk_block(qf, s_k(st), lane, acc);

    // 448 p and the row sums of P8 for this block (softmax_block above).
    const float dq = qs * kscale[(kv0 / kKBlock) * 4];
    float alpha[2], lb[4] = {};
    uint32_t pa[4][4];
    if (kv0 + kBlockN > a.seq)
      softmax_block<true>(acc, dq, kv0, a.seq, lane, m, alpha, pa, lb);
    else
      softmax_block<false>(acc, dq, kv0, a.seq, lane, m, alpha, pa, lb);
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + lb[2 * r];
    // O = O*alpha + P8 V8 (fresh fp32 accumulator per block, 8 channels at a time).
    const uint32_t sv = s_v(st);
#pragma unroll
    for (int jp = 0; jp < 8; ++jp) {
      float ob[2][4] = {};
#pragma unroll
      for (int k2 = 0; k2 < 4; ++k2) {
        uint32_t vb[4];
        ldsm_x4(sv + off128((2 * jp + mat / 2) * 8 + lane % 8, 2 * k2 + mat % 2), vb);
        mma_e4m3(ob[0], pa[k2], vb[0], vb[1]);
        mma_e4m3(ob[1], pa[k2], vb[2], vb[3]);
      }
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        float* oj = o[2 * jp + x];
#pragma unroll
        for (int i = 0; i < 4; ++i) oj[i] = oj[i] * alpha[i / 2] + ob[x][i];
      }
    }
    __syncthreads();
  }

  // Normalize: o * v_scale / l (l sums P8 = 448 p in e4m3, whole rows); bf16 pairs, written
  // and/or encoded to NVFP4 (the same roundings either way).
  const float inv[2] = {1.0f / l[0], 1.0f / l[1]};
  const float* vsc = a.v_scale + h * kD;
  const int row0 = q0 + warp * 16 + lane / 4;
  const auto word = [&](int j, int r) {
    const int d = j * 8 + (lane % 4) * 2;
    const __nv_bfloat162 v = __floats2bfloat162_rn(o[j][2 * r] * (vsc[d] * inv[r]),
                                                   o[j][2 * r + 1] * (vsc[d + 1] * inv[r]));
    return *reinterpret_cast<const uint32_t*>(&v);
  };
  device::write_head_output<kNvfp4>(a.out, a.out_stride, a.nvfp4, a.seq, a.heads, h, row0, lane,
                                    word);
}

#else  // not an arch this kernel is built for: an empty body keeps the symbol.

template <int W, bool kNvfp4, bool kSparse>
__global__ void sage_attn_kernel(KernelArgs) {}

#endif

constexpr int kW = 4;  // warps per CTA of the w4 variant

cudaError_t launch(const SageAttentionParams& p, cudaStream_t stream) {
  constexpr int W = kW;
  KernelArgs a{p.buf.q8,
               p.buf.k8,
               p.buf.v8t,
               p.buf.q_scale,
               p.buf.k_scale,
               p.buf.v_scale,
               static_cast<__nv_bfloat16*>(p.out),
               p.out_row_stride,
               static_cast<int>(p.seq),
               static_cast<int>(padded_len(p.seq)),
               static_cast<int>(p.heads),
               p.nvfp4,
               p.blocks};
  // The NVFP4 epilogue and the sparse form are their own instantiations (see the wgmma launcher).
  const bool sparse = p.blocks.enabled();
  auto kernel =
      p.nvfp4.enabled()
          ? (sparse ? sage_attn_kernel<W, true, true> : sage_attn_kernel<W, true, false>)
          : (sparse ? sage_attn_kernel<W, false, true> : sage_attn_kernel<W, false, false>);
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg<W>::kSmem);
  if (e != cudaSuccess) return e;
  dim3 grid(static_cast<unsigned>((p.seq + Cfg<W>::kRows - 1) / Cfg<W>::kRows),
            static_cast<unsigned>(p.heads));
  kernel<<<grid, Cfg<W>::kThreads, Cfg<W>::kSmem, stream>>>(a);
  return cudaGetLastError();
}

// automatic: wgmma_pp3 on sm_90 when the binary has sm_90a code (the fastest on the H200), else
// w4.
SageVariant resolve(SageVariant v, bool sm90) {
  if (v != SageVariant::automatic) return v;
  return sm90 && cuda::compiled_arch_listed("90a") ? SageVariant::wgmma_pp3 : SageVariant::w4;
}

// The block list's shape matches the variant's tiling of (S, H).
bool blocks_fit(const SageAttentionParams& p, SageVariant v) {
  const attention_sparse::BlockList& b = p.blocks;
  const int64_t tile = sage_query_tile(v);
  return b.count && b.heads == p.heads && b.q_tile == tile &&
         b.n_qtiles == (p.seq + tile - 1) / tile && b.n_kblocks == (p.seq + kBlockN - 1) / kBlockN;
}

}  // namespace

cudaError_t sage_attention(const SageAttentionParams& p, cudaStream_t stream) {
  if (p.seq <= 0 || p.heads <= 0 || p.heads > 65535 || p.seq > (1 << 30) || p.buf.q8 == nullptr)
    return cudaErrorInvalidValue;
  if (p.out && (p.out_row_stride < p.heads * kD || p.out_row_stride % 2 != 0))
    return cudaErrorInvalidValue;
  if (!p.out && !p.nvfp4.enabled()) return cudaErrorInvalidValue;
  if (p.nvfp4.enabled() && (!p.nvfp4.scales || !p.nvfp4.global_scale || p.nvfp4.computed() ||
                            reinterpret_cast<uintptr_t>(p.nvfp4.qdata) % 8 != 0))
    return cudaErrorInvalidValue;
  int dev = 0, major = 0, minor = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (e != cudaSuccess) return e;
  const bool sm90 = major == 9 && minor == 0;
  if (!sage_runs_on(major * 10 + minor)) return cudaErrorNotSupported;
  const SageVariant v = resolve(p.variant, sm90);
  if (p.blocks.enabled() && !blocks_fit(p, v)) return cudaErrorInvalidValue;
  if (v == SageVariant::wgmma_pp3) {
    if (!sm90) return cudaErrorNotSupported;
    return detail::sage_attention_wgmma(p, stream);
  }
  return launch(p, stream);
}

bool sage_runs_on(int cc) {
  // The arch list must name the device's arch, plain or "a" ("90a", "120a", "121a").
  const std::string a = std::to_string(cc);
  return (cc == 90 || cc == 120 || cc == 121) &&
         (cuda::compiled_arch_listed(a) || cuda::compiled_arch_listed(a + "a"));
}

SageVariant sage_resolve_variant(SageVariant v) {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    cudaGetLastError();
    return v == SageVariant::automatic ? SageVariant::w4 : v;
  }
  return resolve(v, major == 9 && minor == 0);
}

int64_t sage_query_tile(SageVariant v) {
  return v == SageVariant::wgmma_pp3 ? 192 : 16 * kW;
}

const char* sage_variant_name(SageVariant v) {
  switch (v) {
    case SageVariant::automatic:
      return "automatic";
    case SageVariant::w4:
      return "w4";
    case SageVariant::wgmma_pp3:
      return "wgmma_pp3";
  }
  return "?";
}

}  // namespace h3rt::attention_sage
