// qk_norm_rope on the GPU (declared in qk_norm_rope.h), in place on the strided QKV buffer.
// One block per (row, group of heads). A half-warp owns one head of q (half-warps 0-7) or of k
// (8-15) at a time, 128 channels, 8 per lane in one 16-byte vector, and works on kSlots heads
// together (8 x kSlots heads per side and block), so every lane has kSlots independent loads in
// flight before any use. A lane covers the same channels in every head of one side, so its norm
// weights and cos/sin values are read and unpacked once per block. The per-head sum of squares is
// accumulated in double (the CPU reference's precision) and reduced across the half-warp by
// transposition: each exchange step halves the number of partial sums a lane holds, so kPad slots
// take about kPad double shuffles in all. The rotation runs on packed bf16 pairs (cuda::bf2_mul /
// bf2_add round exactly as the reference); the rotate-half partner of lane l (channels
// j <-> j + R/2) is lane l +- R/16, fetched with one shuffle per bf16 pair.
// Fewer slots mean smaller blocks with fewer registers, so more of them are resident; the blocks
// of one row are adjacent in the grid so the row's cos/sin is read from DRAM once.
#include "cuda/device_math.cuh"
#include "cuda/runtime.h"
#include "ops/qk_norm_rope/qk_norm_rope.h"

namespace h3rt::ops {

namespace {

constexpr int kHeadDim = 128;
constexpr int kThreads = 256;                  // 16 half-warps
constexpr int kSideHalfWarps = kThreads / 32;  // half-warps per side (q or k)
// Heads per half-warp in flight by default: 4 (two head groups of 32 per side for 56 heads)
// measured 0.616 ms at the seed shape on the H200, against 0.657 ms with 7 and 0.803 ms with 2.
constexpr int kDefaultSlots = 4;

// Slots padded to a power of two for the reduction.
constexpr int pad_of(int slots) {
  return slots > 4 ? 8 : slots > 2 ? 4 : slots > 1 ? 2 : 1;
}

__device__ __forceinline__ uint4 load_f32x4(const float* p, bool pred) {
  return cuda::load_u4(reinterpret_cast<const __nv_bfloat16*>(p), pred);
}

__device__ __forceinline__ float word_f32(const uint4& u, int k) {
  return __uint_as_float(k == 0 ? u.x : k == 1 ? u.y : k == 2 ? u.z : u.w);
}

__device__ __forceinline__ uint32_t& word(uint4& u, int k) {
  return k == 0 ? u.x : k == 1 ? u.y : k == 2 ? u.z : u.w;
}

// One transposition step over n pairs (v[j], v[j + n]): the lane whose `bit` is set keeps the
// upper partial sums and sends the lower ones, its partner the reverse; each kept sum adds the
// partner's. Afterwards v[j] (j < n) holds slot j + n * (lane has bit) of the previous layout.
template <int n, int kPad>
__device__ __forceinline__ void transpose_step(double (&v)[kPad], bool upper, int offset) {
#pragma unroll
  for (int j = 0; j < n; ++j) {
    const double send = upper ? v[j] : v[j + n];
    const double keep = upper ? v[j + n] : v[j];
    v[j] = keep + __shfl_xor_sync(0xffffffffu, send, offset, 16);
  }
}

// All transposition steps: n = kPad/2, kPad/4, .., 1 over lane bits 8, 4, 2, ..
template <int kPad, int n = kPad / 2, int bit = 8>
__device__ __forceinline__ void transpose_all(double (&v)[kPad], int lane) {
  if constexpr (n >= 1) {
    transpose_step<n>(v, lane & bit, bit);
    transpose_all<kPad, n / 2, bit / 2>(v, lane);
  }
}

// Sums slot i over the 16 lanes of the half-warp; the result lands in the lanes with
// lane / (16 / kPad) == i.
template <int kPad>
__device__ __forceinline__ double slot_sums(double (&v)[kPad], int lane) {
  transpose_all(v, lane);
  double s = v[0];
#pragma unroll
  for (int bit = 8 / kPad; bit >= 1; bit /= 2) s += __shfl_xor_sync(0xffffffffu, s, bit, 16);
  return s;
}

template <bool kNorm, bool kRope, int kSlots>
__global__ void __launch_bounds__(kThreads, kSlots > 4   ? 3
                                            : kSlots > 2 ? 4
                                                         : 6)
    qk_norm_rope_kernel(QkNormRopeCudaParams p, int groups) {
  constexpr int kPad = pad_of(kSlots);
  constexpr int kHeadsPerBlock = kSideHalfWarps * kSlots;  // of each side
  const int64_t row = blockIdx.x / groups;
  const int group = static_cast<int>(blockIdx.x % groups);
  const int hw = threadIdx.x >> 4, lane = threadIdx.x & 15;
  const bool is_k = hw >= kSideHalfWarps;
  const int first = hw % kSideHalfWarps;  // first head of this half-warp
  const int heads = static_cast<int>(p.heads);
  const int hl = static_cast<int>(p.rope_dim / 16);  // lanes per rotated half
  const bool rot = kRope && lane < 2 * hl;
  // Row-invariant operands first: norm weights (L1/L2; a null weight reads as bf16 ones) and
  // this lane's cos/sin (L2).
  const __nv_bfloat16* wp = is_k ? p.k_weight : p.q_weight;
  const uint4 ones = make_uint4(0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u);
  const uint4 wu = wp ? cuda::load_u4(wp + lane * 8, kNorm) : ones;
  const float* cp = p.cos + row * p.table_row_stride + lane * 8;
  const float* sp = p.sin + row * p.table_row_stride + lane * 8;
  const uint4 tc[2] = {load_f32x4(cp, rot), load_f32x4(cp + 4, rot)};
  const uint4 ts[2] = {load_f32x4(sp, rot), load_f32x4(sp + 4, rot)};
  __nv_bfloat16* sidep = p.qkv + row * p.row_stride + (is_k ? p.k_offset : p.q_offset) + lane * 8;
  // All lanes run every shuffle below (heads past the end compute on zeros and are not stored),
  // so the full-mask shuffles stay valid.
  {
    const int base = group * kHeadsPerBlock;  // this block's head group
    // Head base + first + 8i of this side: constant offsets from one pointer.
    __nv_bfloat16* hp = sidep + (base + first) * kHeadDim;
    const int left = heads - base - first;  // slot i exists when i * 8 < left
    uint4 xv[kSlots];
#pragma unroll
    for (int i = 0; i < kSlots; ++i)
      xv[i] = cuda::load_u4(hp + i * kSideHalfWarps * kHeadDim, kSideHalfWarps * i < left);
    // cos/sin in bf16; the first half's sine negated (exact), so both halves add:
    // out[j] = n[j] c[j] + n[j+R/2] (-s[j]),  out[j+R/2] = n[j+R/2] c[j+R/2] + n[j] s[j+R/2].
    // Packed while the loads above are in flight (8 registers instead of 16).
    uint4 cb, sb;
    if constexpr (kRope) {
      float c[8], sn[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        c[e] = word_f32(tc[e >> 2], e & 3);
        sn[e] = lane < hl ? -word_f32(ts[e >> 2], e & 3) : word_f32(ts[e >> 2], e & 3);
      }
      cb = cuda::pack_u4(c);  // rounded to bf16, packed
      sb = cuda::pack_u4(sn);
    }
    if constexpr (kNorm) {
      double ss[kPad];
#pragma unroll
      for (int i = 0; i < kPad; ++i) {
        ss[i] = 0.0;
        if (i < kSlots) {
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            const double v = cuda::bf16_elem(xv[i], e);
            ss[i] = fma(v, v, ss[i]);
          }
        }
      }
      // Lanes i * (16 / kPad) .. hold slot i.
      const double mine = slot_sums(ss, lane);
      // mean = ss / 128 in double: a power-of-two scaling, exactly the division. The scale of
      // each slot is computed once (IEEE sqrt and division, as the reference), then fetched.
      const float mean = static_cast<float>(mine * (1.0 / kHeadDim));
      const float inv_mine = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, p.eps)));
      float w[8];
      cuda::unpack_u4(wu, w);
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
        const float inv = __shfl_sync(0xffffffffu, inv_mine, i * (16 / kPad), 16);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float lo = __fmul_rn(__fmul_rn(cuda::bf16_elem(xv[i], 2 * k), inv), w[2 * k]);
          const float hi =
              __fmul_rn(__fmul_rn(cuda::bf16_elem(xv[i], 2 * k + 1), inv), w[2 * k + 1]);
          word(xv[i], k) = cuda::pack_bf2(lo, hi);
        }
      }
    }
    if constexpr (kRope) {
      const int partner = lane < hl ? lane + hl : (lane < 2 * hl ? lane - hl : lane);
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const uint32_t o = __shfl_sync(0xffffffffu, word(xv[i], k), partner, 16);
          const uint32_t r = cuda::bf2_add(cuda::bf2_mul(word(xv[i], k), word(cb, k)),
                                           cuda::bf2_mul(o, word(sb, k)));
          if (rot) word(xv[i], k) = r;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kSlots; ++i)
      if (kSideHalfWarps * i < left) cuda::store_u4(hp + i * kSideHalfWarps * kHeadDim, xv[i]);
  }
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

template <int kSlots>
void launch(const QkNormRopeCudaParams& p, cudaStream_t stream) {
  const int64_t per_block = int64_t(kSideHalfWarps) * kSlots;
  const int groups = static_cast<int>((p.heads + per_block - 1) / per_block);
  H3RT_CHECK(p.rows * groups < (int64_t(1) << 31), "qk_norm_rope_cuda: ", p.rows,
             " rows are too many for one launch");
  const unsigned grid = static_cast<unsigned>(p.rows * groups);
  if (p.norm && p.rope)
    qk_norm_rope_kernel<true, true, kSlots><<<grid, kThreads, 0, stream>>>(p, groups);
  else if (p.norm)
    qk_norm_rope_kernel<true, false, kSlots><<<grid, kThreads, 0, stream>>>(p, groups);
  else
    qk_norm_rope_kernel<false, true, kSlots><<<grid, kThreads, 0, stream>>>(p, groups);
}

}  // namespace

cudaError_t qk_norm_rope_cuda(const QkNormRopeCudaParams& in, cudaStream_t stream) {
  QkNormRopeCudaParams p = in;
  if (!p.table_row_stride) p.table_row_stride = p.rope_dim;
  H3RT_CHECK(p.qkv && p.rows >= 0 && p.heads > 0, "qk_norm_rope_cuda: bad params");
  H3RT_CHECK(p.head_dim == kHeadDim, "qk_norm_rope_cuda: head_dim ", p.head_dim,
             " (only 128 is implemented)");
  H3RT_CHECK(p.rope_dim % 16 == 0 && p.rope_dim <= kHeadDim, "qk_norm_rope_cuda: rope_dim ",
             p.rope_dim, " must be a multiple of 16 and <= 128");
  H3RT_CHECK(p.row_stride % 8 == 0 && p.q_offset % 8 == 0 && p.k_offset % 8 == 0,
             "qk_norm_rope_cuda: row stride and offsets must be multiples of 8 elements");
  const int64_t span = p.heads * kHeadDim;
  H3RT_CHECK(p.q_offset + span <= p.row_stride && p.k_offset + span <= p.row_stride,
             "qk_norm_rope_cuda: q/k columns exceed the row stride ", p.row_stride);
  H3RT_CHECK(!p.rope || (p.cos && p.sin && p.table_row_stride % 4 == 0 && aligned16(p.cos) &&
                         aligned16(p.sin) && p.table_row_stride >= p.rope_dim),
             "qk_norm_rope_cuda: rope needs 16-byte aligned cos/sin tables with a row stride "
             ">= rope_dim and a multiple of 4");
  H3RT_CHECK(aligned16(p.qkv) && aligned16(p.q_weight) && aligned16(p.k_weight),
             "qk_norm_rope_cuda: pointers must be 16-byte aligned");
  H3RT_CHECK(p.row_stride < (int64_t(1) << 31), "qk_norm_rope_cuda: row stride ", p.row_stride,
             " must fit in 31 bits");
  if (p.rows == 0 || (!p.norm && !p.rope)) return cudaSuccess;
  switch (p.slots) {
    case 0:
      launch<kDefaultSlots>(p, stream);
      break;
    case 7:
      launch<7>(p, stream);
      break;
    case 4:
      launch<4>(p, stream);
      break;
    case 2:
      launch<2>(p, stream);
      break;
    default:
      H3RT_FAIL("qk_norm_rope_cuda: slots ", p.slots, " (0, 2, 4 or 7)");
  }
  return H3RT_LAUNCH_CHECK("qk_norm_rope");
}

}  // namespace h3rt::ops
