// Persistent "ring" variant of rmsnorm_modulate (RmsNormModulateCudaParams::variant 1..4; see
// rmsnorm_modulate.h), for the bf16-output path without the fused residual. Included by cuda.cu
// only. Each CTA walks the rows blockIdx.x, +gridDim.x, ...; thread 0 streams every row of x (and,
// with kSmemTables, that row's shift and scale table rows) into a ring of kStages shared-memory
// slots with cp.async.bulk, completing on one mbarrier per slot, so kStages rows per CTA are in
// flight whatever phase the CTA's threads are in (the one-row-per-CTA kernel has loads in flight
// only between its start and its reduction). Thread 0 refills a slot right after the block
// reduction's barrier, when every thread holds the slot's values in registers. The per-thread
// chunk mapping, the double sums and cuda::block_sum are the default kernel's, so the output is
// bit-identical to it. Needs sm_90 (bulk copies, mbarrier parity waits).
#pragma once

#include "cuda/device_math.cuh"
#include "cuda/sm90_async.cuh"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"

namespace h3rt::ops::rmsnorm_ring {

constexpr int kMaxThreads = 256;

// Shared-memory layout: kStages mbarriers (one 16-byte cell each), then kStages slots of
// `arrays` rows of dim bf16 values (x, then shift and scale with kSmemTables).
constexpr int kBarBytes = 16;

__host__ __device__ inline uint32_t slot_bytes(int64_t dim, bool smem_tables) {
  return static_cast<uint32_t>((smem_tables ? 3 : 1) * dim * 2);
}

__device__ __forceinline__ uint4 lds_u4(const unsigned char* p, bool pred) {
  return pred ? *reinterpret_cast<const uint4*>(p) : make_uint4(0, 0, 0, 0);
}

// This thread's part of a row's sum of squares, in double (squares of bf16 values are exact, so
// the sum does not depend on the order) over two chains.
template <int kVec>
__device__ __forceinline__ double sum_squares(const uint4 (&xv)[kVec]) {
  double ss[2] = {0.0, 0.0};
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const double v = cuda::bf16_elem(xv[i], e);
      ss[e & 1] = fma(v, v, ss[e & 1]);
    }
  }
  return ss[0] + ss[1];
}

// 1 / sqrt(mean + eps) from the row's sum of squares, rounded as the CPU reference does.
__device__ __forceinline__ float inv_rms(double sum, int64_t dim, float eps) {
  const float mean = static_cast<float>(__ddiv_rn(sum, static_cast<double>(dim)));
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

// y = round(round(n * round(1 + scale)) + shift), n = round(x * inv * w), on 8 packed values:
// the same operations as the default kernel's bf16-output path.
template <bool kModulate>
__device__ __forceinline__ uint4 modulate8(const uint4& x, float inv, const uint4& w, bool has_w,
                                           const uint4& sh, const uint4& sc) {
  float n[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float wf = has_w ? cuda::bf16_elem(w, e) : 1.0f;
    n[e] = __fmul_rn(__fmul_rn(cuda::bf16_elem(x, e), inv), wf);
  }
  uint4 y = make_uint4(cuda::pack_bf2(n[0], n[1]), cuda::pack_bf2(n[2], n[3]),
                       cuda::pack_bf2(n[4], n[5]), cuda::pack_bf2(n[6], n[7]));
  if constexpr (kModulate) {
    const uint32_t one = 0x3f803f80u;
    y = make_uint4(cuda::bf2_add(cuda::bf2_mul(y.x, cuda::bf2_add(one, sc.x)), sh.x),
                   cuda::bf2_add(cuda::bf2_mul(y.y, cuda::bf2_add(one, sc.y)), sh.y),
                   cuda::bf2_add(cuda::bf2_mul(y.z, cuda::bf2_add(one, sc.z)), sh.z),
                   cuda::bf2_add(cuda::bf2_mul(y.w, cuda::bf2_add(one, sc.w)), sh.w));
  }
  return y;
}

// kSmemTables: shift/scale rows come through the ring; otherwise every thread loads its table
// vectors from L2 at the start of the row (the table row index is prefetched one row ahead).
template <int kVec, bool kModulate, int kStages, bool kSmemTables, int kMinBlocks>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks)
    ring_kernel(RmsNormModulateCudaParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // never launched: the host dispatches this variant only on sm_90 and newer
#else
  namespace a = cuda::sm90;
  constexpr bool kTablesInRing = kModulate && kSmemTables;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* ring = smem + kStages * kBarBytes;
  const int nvec = static_cast<int>(p.dim / 8);
  const uint32_t row_bytes = static_cast<uint32_t>(p.dim * 2);
  const uint32_t sbytes = slot_bytes(p.dim, kTablesInRing);
  const int64_t step = gridDim.x;
  auto bar = [&](int s) { return a::smem_addr(smem + s * kBarBytes); };
  auto table_row = [&](int64_t row) -> int64_t {
    return kModulate && p.row_table_index && row < p.rows ? p.row_table_index[row] : 0;
  };
  // Thread 0: all bytes of row `row` (table row t) into slot s.
  auto issue = [&](int64_t row, int64_t t, int s) {
    unsigned char* dst = ring + s * sbytes;
    a::bar_expect_tx(bar(s), sbytes);
    a::bulk_load(a::smem_addr(dst), p.x + row * p.x_row_stride, row_bytes, bar(s));
    if constexpr (kTablesInRing) {
      a::bulk_load(a::smem_addr(dst + row_bytes), p.shift + t * p.table_row_stride, row_bytes,
                   bar(s));
      a::bulk_load(a::smem_addr(dst + 2 * row_bytes), p.scale + t * p.table_row_stride, row_bytes,
                   bar(s));
    }
  };
  int64_t t_issue = 0;  // thread 0: table row of the next row to issue (prefetched)
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) a::bar_init(bar(s), 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      const int64_t row = blockIdx.x + s * step;
      if (row < p.rows) issue(row, table_row(row), s);
    }
    t_issue = table_row(blockIdx.x + kStages * step);
  }
  __syncthreads();  // barriers initialized before anyone waits on them
  int64_t t_next = kTablesInRing ? 0 : table_row(blockIdx.x);
  // Without kTablesInRing the shift and scale vectors stay in registers from row to row and are
  // reloaded only when the table row changes (the rows of one segment share it).
  uint4 shv[kVec] = {}, scv[kVec] = {};
  int64_t t_have = -1;
  int k = 0;
  for (int64_t row = blockIdx.x; row < p.rows; row += step, ++k) {
    const int s = k % kStages;
    // L1/L2 loads issued before the wait, consumed after the reduction: the weight (L1, fewer
    // registers than keeping it across rows) and, without kTablesInRing, new table rows.
    uint4 xv[kVec], wv[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int c = threadIdx.x + i * blockDim.x;
      wv[i] = cuda::load_u4(p.weight + c * 8, p.weight && c < nvec);
    }
    if constexpr (kModulate && !kTablesInRing) {
      const int64_t t = t_next;
      t_next = table_row(row + step);
      if (t != t_have) {  // uniform over the CTA
        t_have = t;
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          const int c = threadIdx.x + i * blockDim.x;
          shv[i] = cuda::load_u4(p.shift + t * p.table_row_stride + c * 8, c < nvec);
          scv[i] = cuda::load_u4(p.scale + t * p.table_row_stride + c * 8, c < nvec);
        }
      }
    }
    a::bar_wait(bar(s), (k / kStages) & 1);
    const unsigned char* src = ring + s * sbytes;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int c = threadIdx.x + i * blockDim.x;
      xv[i] = lds_u4(src + c * 16, c < nvec);
      if constexpr (kTablesInRing) {
        shv[i] = lds_u4(src + row_bytes + c * 16, c < nvec);
        scv[i] = lds_u4(src + 2 * row_bytes + c * 16, c < nvec);
      }
    }
    const double sum = cuda::block_sum(sum_squares(xv));
    // block_sum's barriers order every thread's reads of slot s before this refill.
    if (threadIdx.x == 0) {
      const int64_t next = row + kStages * step;
      if (next < p.rows) {
        issue(next, t_issue, s);
        t_issue = table_row(next + step);
      }
    }
    const float inv = inv_rms(sum, p.dim, p.eps);
    __nv_bfloat16* yr = p.y + row * p.y_row_stride;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int c = threadIdx.x + i * blockDim.x;
      const uint4 y = modulate8<kModulate>(xv[i], inv, wv[i], p.weight != nullptr, shv[i], scv[i]);
      if (c < nvec) cuda::store_u4(yr + c * 8, y);
    }
  }
#endif
}

}  // namespace h3rt::ops::rmsnorm_ring
