// qk_norm_rope on the GPU (declared in qk_norm_rope.h), in place on the strided QKV buffer.
// One block per row. A half-warp owns one (q|k, head) slot of 128 channels at a time, 8 per lane
// in one 16-byte vector, and works on kSlots slots together (16 x 7 = 112 = q and k of 56 heads),
// so every lane has kSlots independent loads in flight before any use. A lane covers the same
// channels in every head, so its cos/sin values (and norm weights) are read once per row.
// The per-head sum of squares is a 4-step shuffle reduction in double (exact for bf16 inputs,
// matching the CPU reference bit for bit); the rotate-half partner of lane l (channels
// j <-> j + R/2) is lane l +- R/16, fetched with one shuffle per bf16 pair.
#include "cuda/device_math.cuh"
#include "cuda/runtime.h"
#include "ops/qk_norm_rope/qk_norm_rope.h"

namespace h3rt::ops {

namespace {

using cuda::rbf;

constexpr int kHeadDim = 128;
constexpr int kThreads = 256;  // 16 half-warps
constexpr int kHalfWarps = kThreads / 16;
constexpr int kSlots = 7;  // slots per half-warp in flight

__device__ __forceinline__ uint4 load_f32x4(const float* p, bool pred) {
  return cuda::load_u4(reinterpret_cast<const __nv_bfloat16*>(p), pred);
}

// Packs 8 floats that already hold bf16 values (low 16 bits zero): byte permutes, no rounding.
__device__ __forceinline__ uint4 pack_exact(const float (&v)[8]) {
  auto pair = [](float lo, float hi) {
    return __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632);
  };
  return make_uint4(pair(v[0], v[1]), pair(v[2], v[3]), pair(v[4], v[5]), pair(v[6], v[7]));
}

__device__ __forceinline__ float word_f32(const uint4& u, int k) {
  return __uint_as_float(k == 0 ? u.x : k == 1 ? u.y : k == 2 ? u.z : u.w);
}

template <bool kNorm, bool kRope>
__global__ void __launch_bounds__(kThreads, 3) qk_norm_rope_kernel(QkNormRopeCudaParams p) {
  const int64_t row = blockIdx.x;
  const int hw = threadIdx.x >> 4, lane = threadIdx.x & 15;
  const int heads = static_cast<int>(p.heads), nslots = 2 * heads;
  const int qoff = static_cast<int>(p.q_offset), koff = static_cast<int>(p.k_offset);
  const int hl = static_cast<int>(p.rope_dim / 16);  // lanes per rotated half
  const bool rot = kRope && lane < 2 * hl;
  // Row-invariant operands first: norm weights (L1/L2; a null weight reads as bf16 ones) and
  // this lane's cos/sin (L2).
  const uint4 ones = make_uint4(0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u);
  const uint4 wq = p.q_weight ? cuda::load_u4(p.q_weight + lane * 8, kNorm) : ones;
  const uint4 wk = p.k_weight ? cuda::load_u4(p.k_weight + lane * 8, kNorm) : ones;
  const float* cp = p.cos + row * p.table_row_stride + lane * 8;
  const float* sp = p.sin + row * p.table_row_stride + lane * 8;
  const uint4 tc[2] = {load_f32x4(cp, rot), load_f32x4(cp + 4, rot)};
  const uint4 ts[2] = {load_f32x4(sp, rot), load_f32x4(sp + 4, rot)};
  __nv_bfloat16* rowp = p.qkv + row * p.row_stride + lane * 8;
  auto column = [&](int slot) {
    return slot >= heads ? koff + (slot - heads) * kHeadDim : qoff + slot * kHeadDim;
  };
  // All lanes run every shuffle below (slots past the end compute on zeros and are not stored),
  // so the full-mask shuffles stay valid.
  for (int base = 0; base < nslots; base += kHalfWarps * kSlots) {
    uint4 xv[kSlots];
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int slot = base + hw + kHalfWarps * i;
      xv[i] = cuda::load_u4(rowp + column(slot), slot < nslots);
    }
    float inv[kSlots];
    if constexpr (kNorm) {
      double ss[kSlots];
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
        double a = 0.0, b = 0.0;  // two chains; the exact sum does not depend on the order
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
          const double u = cuda::bf16_elem(xv[i], e), v = cuda::bf16_elem(xv[i], e + 1);
          a = fma(u, u, a);
          b = fma(v, v, b);
        }
        ss[i] = a + b;
      }
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) {
#pragma unroll
        for (int i = 0; i < kSlots; ++i) ss[i] += __shfl_xor_sync(0xffffffffu, ss[i], o, 16);
      }
      // Lane i computes the scale of slot i once (IEEE sqrt and division, as the reference);
      // the half-warp then fetches each slot's scale by shuffle.
      static_assert(kSlots <= 16, "one lane per slot");
      double mine = ss[0];
#pragma unroll
      for (int i = 1; i < kSlots; ++i) mine = lane == i ? ss[i] : mine;
      // mean = ss / 128 in double: a power-of-two scaling, exactly the division.
      const float mean = static_cast<float>(mine * (1.0 / kHeadDim));
      const float inv_mine = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, p.eps)));
#pragma unroll
      for (int i = 0; i < kSlots; ++i) inv[i] = __shfl_sync(0xffffffffu, inv_mine, i, 16);
    }
    // cos/sin in bf16; the first half's sine negated (exact), so both halves add:
    // out[j] = n[j] c[j] + n[j+R/2] (-s[j]),  out[j+R/2] = n[j+R/2] c[j+R/2] + n[j] s[j+R/2].
    float c[8], sn[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      c[e] = word_f32(tc[e >> 2], e & 3);
      sn[e] = lane < hl ? -word_f32(ts[e >> 2], e & 3) : word_f32(ts[e >> 2], e & 3);
    }
    const uint4 cb = cuda::pack_u4(c), sb = cuda::pack_u4(sn);  // rounded to bf16, packed
    const int partner = lane < hl ? lane + hl : (lane < 2 * hl ? lane - hl : lane);
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int slot = base + hw + kHalfWarps * i;
      float v[8];  // bf16 values held as floats
      if constexpr (kNorm) {
        const uint4 w = slot >= heads ? wk : wq;
#pragma unroll
        for (int e = 0; e < 8; ++e)
          v[e] =
              rbf(__fmul_rn(__fmul_rn(cuda::bf16_elem(xv[i], e), inv[i]), cuda::bf16_elem(w, e)));
        xv[i] = pack_exact(v);
      } else {
        cuda::unpack_u4(xv[i], v);
      }
      if constexpr (kRope) {
        uint4 o;
        o.x = __shfl_sync(0xffffffffu, xv[i].x, partner, 16);
        o.y = __shfl_sync(0xffffffffu, xv[i].y, partner, 16);
        o.z = __shfl_sync(0xffffffffu, xv[i].z, partner, 16);
        o.w = __shfl_sync(0xffffffffu, xv[i].w, partner, 16);
        if (rot) {
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            const float a = rbf(__fmul_rn(v[e], cuda::bf16_elem(cb, e)));
            const float b = rbf(__fmul_rn(cuda::bf16_elem(o, e), cuda::bf16_elem(sb, e)));
            v[e] = __fadd_rn(a, b);
          }
          xv[i] = cuda::pack_u4(v);
        }
      }
      if (slot < nslots) cuda::store_u4(rowp + column(slot), xv[i]);
    }
  }
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
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
  const unsigned grid = static_cast<unsigned>(p.rows);
  if (p.norm && p.rope)
    qk_norm_rope_kernel<true, true><<<grid, kThreads, 0, stream>>>(p);
  else if (p.norm)
    qk_norm_rope_kernel<true, false><<<grid, kThreads, 0, stream>>>(p);
  else
    qk_norm_rope_kernel<false, true><<<grid, kThreads, 0, stream>>>(p);
  return H3RT_LAUNCH_CHECK("qk_norm_rope");
}

}  // namespace h3rt::ops
