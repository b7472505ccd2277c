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
#include <algorithm>
#include <type_traits>

#include "cuda/device_math.cuh"
#include "cuda/runtime.h"
#include "cuda/sm90_async.cuh"
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

// Norm and rotation of kSlots heads held by this lane (8 channels each, lane = threadIdx.x % 16),
// in place in xv. Every lane of the warp must call (full-mask shuffles). tc/ts: this lane's 8
// cos/sin values (float32, zeros when !rot), wu: its 8 norm weights (packed bf16).
template <bool kNorm, bool kRope, int kSlots>
__device__ __forceinline__ void norm_rope(uint4 (&xv)[kSlots], const uint4& wu,
                                          const uint4 (&tc)[2], const uint4 (&ts)[2], int lane,
                                          int hl, bool rot, float eps) {
  constexpr int kPad = pad_of(kSlots);
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
    const float inv_mine = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
    float w[8];
    cuda::unpack_u4(wu, w);
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const float inv = __shfl_sync(0xffffffffu, inv_mine, i * (16 / kPad), 16);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float lo = __fmul_rn(__fmul_rn(cuda::bf16_elem(xv[i], 2 * k), inv), w[2 * k]);
        const float hi = __fmul_rn(__fmul_rn(cuda::bf16_elem(xv[i], 2 * k + 1), inv), w[2 * k + 1]);
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
}

template <bool kNorm, bool kRope, int kSlots>
__global__ void __launch_bounds__(kThreads, kSlots > 4   ? 3
                                            : kSlots > 2 ? 4
                                                         : 6)
    qk_norm_rope_kernel(QkNormRopeCudaParams p, int groups) {
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
    norm_rope<kNorm, kRope>(xv, wu, tc, ts, lane, hl, rot, p.eps);
#pragma unroll
    for (int i = 0; i < kSlots; ++i)
      if (kSideHalfWarps * i < left) cuda::store_u4(hp + i * kSideHalfWarps * kHeadDim, xv[i]);
  }
}

// Persistent "ring" kernel (QkNormRopeCudaParams::ring, heads <= 56, sm_90+). Each CTA
// walks the rows blockIdx.x, +gridDim.x, ...; thread 0 streams a row's q span, k span and
// cos/sin rows (contiguous in global memory: one bulk copy each, 29.4 KB at the seed shape)
// into a ring of kStages shared-memory slots with cp.async.bulk, completing on one mbarrier per
// slot, so kStages rows per CTA stay in flight while the threads compute. The threads take their
// 7 heads per half-warp (8 x 7 = 56 per side, the default kernel's layout with kSlots = 7) from
// the slot and store the results to global memory in place.
// The norm/rotation is norm_rope, shared with the default kernel. A slot is refilled at the
// start of the next row, after a barrier, so its copy overlaps a whole row of compute.
constexpr int kRingSlots = 7;
constexpr int kRingHeads = kSideHalfWarps * kRingSlots;  // per side
constexpr int kRingBarBytes = 16;

__host__ __device__ inline uint32_t ring_slot_bytes(int64_t heads, int64_t rope_dim, bool rope) {
  return static_cast<uint32_t>(2 * heads * kHeadDim * 2 + (rope ? 2 * rope_dim * 4 : 0));
}

__device__ __forceinline__ uint4 lds_u4(const unsigned char* p, bool pred) {
  return pred ? *reinterpret_cast<const uint4*>(p) : make_uint4(0, 0, 0, 0);
}

template <bool kNorm, bool kRope, int kStages, int kMinBlocks, int kPass>
__global__ void __launch_bounds__(kThreads, kMinBlocks) qk_ring_kernel(QkNormRopeCudaParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // never launched: the host dispatches this variant only on sm_90 and newer
#else
  namespace a = cuda::sm90;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* ring = smem + kStages * kRingBarBytes;
  const uint32_t span = static_cast<uint32_t>(p.heads * kHeadDim * 2);
  const uint32_t tbytes = static_cast<uint32_t>(p.rope_dim * 4);
  const uint32_t sbytes = ring_slot_bytes(p.heads, p.rope_dim, kRope);
  const int64_t step = gridDim.x;
  auto bar = [&](int s) { return a::smem_addr(smem + s * kRingBarBytes); };
  auto issue = [&](int64_t row, int s) {
    unsigned char* dst = ring + s * sbytes;
    const __nv_bfloat16* r = p.qkv + row * p.row_stride;
    a::bar_expect_tx(bar(s), sbytes);
    a::bulk_load(a::smem_addr(dst), r + p.q_offset, span, bar(s));
    a::bulk_load(a::smem_addr(dst + span), r + p.k_offset, span, bar(s));
    if constexpr (kRope) {
      a::bulk_load(a::smem_addr(dst + 2 * span), p.cos + row * p.table_row_stride, tbytes, bar(s));
      a::bulk_load(a::smem_addr(dst + 2 * span + tbytes), p.sin + row * p.table_row_stride, tbytes,
                   bar(s));
    }
  };
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) a::bar_init(bar(s), 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#pragma unroll
    for (int s = 0; s < kStages; ++s)
      if (blockIdx.x + s * step < p.rows) issue(blockIdx.x + s * step, s);
  }
  __syncthreads();  // barriers initialized before anyone waits on them
  const int hw = threadIdx.x >> 4, lane = threadIdx.x & 15;
  const bool is_k = hw >= kSideHalfWarps;
  const int first = hw % kSideHalfWarps;
  const int left = static_cast<int>(p.heads) - first;  // slot i exists when i * 8 < left
  const int hl = static_cast<int>(p.rope_dim / 16);
  const bool rot = kRope && lane < 2 * hl;
  const __nv_bfloat16* wp = is_k ? p.k_weight : p.q_weight;
  const uint4 ones = make_uint4(0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u);
  const uint4 wu = wp ? cuda::load_u4(wp + lane * 8, kNorm) : ones;
  const int64_t side_col = (is_k ? p.k_offset : p.q_offset) + first * kHeadDim + lane * 8;
  // Heads of this half-warp: slots i < 7 at head first + 8i, taken in passes of kPass heads
  // (4 + 3 or 2 + 2 + 2 + 1) to bound the registers; the data stays in shared memory for all.
  auto pass = [&](auto n_tag, int i0, const unsigned char* hs, const uint4(&tc)[2],
                  const uint4(&ts)[2], __nv_bfloat16* hp) {
    constexpr int n = decltype(n_tag)::value;
    uint4 xv[n];
#pragma unroll
    for (int i = 0; i < n; ++i) {
      const int off = (i0 + i) * kSideHalfWarps;
      xv[i] = lds_u4(hs + off * kHeadDim * 2, off < left);
    }
    norm_rope<kNorm, kRope>(xv, wu, tc, ts, lane, hl, rot, p.eps);
#pragma unroll
    for (int i = 0; i < n; ++i) {
      const int off = (i0 + i) * kSideHalfWarps;
      if (off < left) cuda::store_u4(hp + off * kHeadDim, xv[i]);
    }
  };
  int k = 0;
  for (int64_t row = blockIdx.x; row < p.rows; row += step, ++k) {
    const int s = k % kStages;
    if (k > 0) {
      __syncthreads();  // every thread is done with the previous row's slot: refill it
      const int sp = (k - 1) % kStages;
      const int64_t next = row - step + kStages * step;
      if (threadIdx.x == 0 && next < p.rows) issue(next, sp);
    }
    a::bar_wait(bar(s), (k / kStages) & 1);
    const unsigned char* src = ring + s * sbytes;
    const unsigned char* hs = src + (is_k ? span : 0) + first * kHeadDim * 2 + lane * 16;
    uint4 tc[2], ts[2];
    const unsigned char* cs = src + 2 * span + lane * 32;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      tc[j] = lds_u4(cs + 16 * j, rot);
      ts[j] = lds_u4(cs + tbytes + 16 * j, rot);
    }
    __nv_bfloat16* hp = p.qkv + row * p.row_stride + side_col;
    if constexpr (kPass == 4) {
      pass(std::integral_constant<int, 4>{}, 0, hs, tc, ts, hp);
      pass(std::integral_constant<int, 3>{}, 4, hs, tc, ts, hp);
    } else {
      static_assert(kPass == 2, "passes of 4 + 3 or 2 + 2 + 2 + 1 heads");
      pass(std::integral_constant<int, 2>{}, 0, hs, tc, ts, hp);
      pass(std::integral_constant<int, 2>{}, 2, hs, tc, ts, hp);
      pass(std::integral_constant<int, 2>{}, 4, hs, tc, ts, hp);
      pass(std::integral_constant<int, 1>{}, 6, hs, tc, ts, hp);
    }
  }
#endif
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

// One CTA per resident slot of the GPU (occupancy query with the ring's shared memory); false
// when the device or the shape cannot run the ring (the caller then uses the default kernel).
template <bool kNorm, bool kRope, int kStages, int kMinBlocks, int kPass>
bool launch_ring_as(const QkNormRopeCudaParams& p, cudaStream_t stream) {
  auto* fn = qk_ring_kernel<kNorm, kRope, kStages, kMinBlocks, kPass>;
  const size_t smem = kStages * (kRingBarBytes + ring_slot_bytes(p.heads, p.rope_dim, kRope));
  const int resident = cuda::resident_grid(reinterpret_cast<const void*>(fn), kThreads, smem, 9);
  if (resident < 1) return false;
  const int64_t grid = std::min<int64_t>(p.rows, resident);
  fn<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(p);
  return true;
}

template <int kStages, int kMinBlocks, int kPass>
bool launch_ring_stages(const QkNormRopeCudaParams& p, cudaStream_t stream) {
  if (p.norm && p.rope) return launch_ring_as<true, true, kStages, kMinBlocks, kPass>(p, stream);
  if (p.norm) return launch_ring_as<true, false, kStages, kMinBlocks, kPass>(p, stream);
  return launch_ring_as<false, true, kStages, kMinBlocks, kPass>(p, stream);
}

bool try_ring(const QkNormRopeCudaParams& p, cudaStream_t stream) {
  if (!p.ring || p.heads > kRingHeads) return false;
  return launch_ring_stages<4, 1, 4>(p, stream);  // 4 slots (117.8 KB: 1 CTA per SM), passes of 4
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
  H3RT_CHECK(!p.rope || (p.cos && p.sin && p.table_row_stride % 4 == 0 && cuda::aligned16(p.cos) &&
                         cuda::aligned16(p.sin) && p.table_row_stride >= p.rope_dim),
             "qk_norm_rope_cuda: rope needs 16-byte aligned cos/sin tables with a row stride "
             ">= rope_dim and a multiple of 4");
  H3RT_CHECK(cuda::aligned16(p.qkv) && cuda::aligned16(p.q_weight) && cuda::aligned16(p.k_weight),
             "qk_norm_rope_cuda: pointers must be 16-byte aligned");
  H3RT_CHECK(p.row_stride < (int64_t(1) << 31), "qk_norm_rope_cuda: row stride ", p.row_stride,
             " must fit in 31 bits");
  if (p.rows == 0 || (!p.norm && !p.rope)) return cudaSuccess;
  if (try_ring(p, stream)) return H3RT_LAUNCH_CHECK("qk_norm_rope");
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
