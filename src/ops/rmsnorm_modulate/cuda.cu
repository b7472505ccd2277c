// rmsnorm_modulate on the GPU (declared in rmsnorm_modulate.h). One block per row; each thread
// keeps kVec 16-byte vectors of the row in registers (packed bf16), so x is read once and y
// written once. Every load of a phase is issued before the first use (guards are predicates,
// not branches), and the weight/shift/scale rows are fetched before the reduction so their
// latency overlaps it. The sum of squares is accumulated in double, as the CPU reference does:
// squares of bf16 values are exact in double, so the sum (and hence the norm) does not depend
// on the reduction order and the result is bit-exact with rmsnorm_modulate_cpu in bf16 mode.
// Without the residual, the modulation runs on packed bf16 pairs (cuda::bf2_mul / bf2_add round
// exactly as the reference), which cuts the instructions per element roughly in half.
#include <algorithm>

#include "cuda/device_math.cuh"
#include "cuda/runtime.h"
#include "formats/nvfp4_quantize_fused.cuh"
#include "ops/int8_linear/rotate_quantize.cuh"
#include "ops/linear/e4m3_out.cuh"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"
#include "ops/rmsnorm_modulate/row_math.cuh"

namespace h3rt::ops {

namespace {

using cuda::rbf;
using namespace nvfp4_detail;  // FusedMode, encode_pair_chunk, finish_amax_pass

constexpr int kMaxVec = 4;    // vectors per thread: up to 1024 * 4 * 8 = 32768 channels
constexpr int kFuseInt8 = 3;  // FusedMode beyond NVFP4's: stage y, rotate + quantize (int8_fused.h)
using e4m3_detail::kFuseE4m3;             // y as e4m3 with the static scale (e4m3_out.h)
constexpr int kInt8MaxDim = 256 * 3 * 8;  // the kVec 3 kernel: one row per CTA of <= 256 threads

// kVec 3 (at most 256 threads, dims up to 6144, the release width) fetches the weight/shift/scale
// rows before the reduction; kVec 4 (up to 1024 threads) after it, to stay within 64 registers.
template <int kVec>
constexpr int kMaxThreads = kVec == 3 ? 256 : 1024;
// Minimum resident blocks for __launch_bounds__. kVec 3 without the residual: at most 64
// registers, so 4 blocks of 224 threads (5376 channels) share an SM (3 at 80 registers). The
// residual variants keep 0 (no minimum, the compiler's default), which measured faster.
// The NVFP4 variants keep the default as well (the encoder needs registers).
template <int kVec, bool kResidual, int kFuse>
constexpr int kMinBlocks = kResidual || kFuse != kFuseNone ? 0 : (kVec == 3 ? 4 : 1);

// kFuse (FusedMode): kFuseNone writes y; kFuseEncode encodes y to p.nvfp4 with g =
// *p.nvfp4.global_scale (and writes y too if p.y is set); kFuseAmax only reduces amax|y| into
// the workspace (the residual, if fused, is still added and x written back); kFuseInt8 stages y
// in dynamic shared memory (writing y too if set), then rotates and quantizes the row with group
// kGroup into p.int8; kFuseE4m3 writes y's e4m3 encoding to p.e4m3 (and y too if set).
template <int kVec, bool kModulate, bool kResidual, int kFuse, int kGroup = 0>
__global__ void __launch_bounds__(kMaxThreads<kVec>, kMinBlocks<kVec, kResidual, kFuse>)
    rmsnorm_modulate_kernel(RmsNormModulateCudaParams p) {
  extern __shared__ __align__(16) unsigned char int8_stage[];  // kFuseInt8: row, then tiles
  constexpr bool kEarlyTables = kVec == 3;
  const int64_t row = blockIdx.x;
  const int nvec = static_cast<int>(p.dim / 8);
  const float g = kFuse == kFuseEncode ? *p.nvfp4.global_scale : 0.0f;
  const float e4m3_scale = kFuse == kFuseE4m3 ? *p.e4m3.scale : 1.0f;
  uint32_t amax16 = 0;  // kFuseAmax: this thread's max |y| (bf16 bits)
  // Output vector c: 8 values of y, rounded to bf16 exactly as the plain kernel stores them.
  auto emit = [&](int c, const uint4& y) {
    const bool active = c < nvec;
    if constexpr (kFuse == kFuseNone) {
      if (active) cuda::store_u4(p.y + row * p.y_row_stride + c * 8, y);
    } else if constexpr (kFuse == kFuseEncode) {
      if (p.y && active) cuda::store_u4(p.y + row * p.y_row_stride + c * 8, y);
      encode_pair_chunk(y, active, g, p.nvfp4, row, c, p.dim);
    } else if constexpr (kFuse == kFuseInt8) {
      if (p.y && active) cuda::store_u4(p.y + row * p.y_row_stride + c * 8, y);
      if (active) *reinterpret_cast<uint4*>(int8_stage + int8_detail::staged_offset(c * 8)) = y;
    } else if constexpr (kFuse == kFuseE4m3) {
      if (p.y && active) cuda::store_u4(p.y + row * p.y_row_stride + c * 8, y);
      if (active) e4m3_detail::store8(p.e4m3, row, p.dim, c, y, e4m3_scale);
    } else {
      if (active) amax16 = max(amax16, absmax_bits16(y));
    }
  };
  __nv_bfloat16* xr = p.x + row * p.x_row_stride;
  uint4 xv[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    xv[i] = cuda::load_u4(xr + c * 8, c < nvec);
  }
  const bool tables = kModulate || (kResidual && p.residual_gate);
  const int64_t t = tables && p.row_table_index ? p.row_table_index[row] : 0;
  if constexpr (kResidual) {
    const __nv_bfloat16* rr = p.residual + row * p.residual_row_stride;
    const __nv_bfloat16* gr = p.residual_gate ? p.residual_gate + t * p.table_row_stride : nullptr;
    // x = round(x + round(g * r)) for vector i, written back to x.
    auto combine = [&](int i, const uint4& rv, const uint4& gv) {
      const int c = threadIdx.x + i * blockDim.x;
      float x[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float r = cuda::bf16_elem(rv, e);
        if (gr) r = rbf(__fmul_rn(cuda::bf16_elem(gv, e), r));
        x[e] = rbf(__fadd_rn(cuda::bf16_elem(xv[i], e), r));
      }
      xv[i] = cuda::pack_u4(x);
      if (c < nvec) cuda::store_u4(xr + c * 8, xv[i]);
    };
    if constexpr (kEarlyTables) {  // all residual and gate loads in flight together
      uint4 rv[kVec], gv[kVec];
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const int c = threadIdx.x + i * blockDim.x;
        rv[i] = cuda::load_u4_stream(rr + c * 8, c < nvec);
        gv[i] = cuda::load_u4(gr + c * 8, gr && c < nvec);
      }
#pragma unroll
      for (int i = 0; i < kVec; ++i) combine(i, rv[i], gv[i]);
    } else {  // one vector at a time (register budget of 1024 threads)
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const int c = threadIdx.x + i * blockDim.x;
        combine(i, cuda::load_u4_stream(rr + c * 8, c < nvec),
                cuda::load_u4(gr + c * 8, gr && c < nvec));
      }
    }
  }
  // Row-invariant operands (L2-resident); fetched early, their latency hides behind the reduction.
  uint4 wv[kVec], shv[kVec], scv[kVec];
  const __nv_bfloat16* shr = kModulate ? p.shift + t * p.table_row_stride : nullptr;
  const __nv_bfloat16* scr = kModulate ? p.scale + t * p.table_row_stride : nullptr;
  auto fetch_tables = [&](int i) {
    const int c = threadIdx.x + i * blockDim.x;
    wv[i] = cuda::load_u4(p.weight + c * 8, p.weight && c < nvec);
    if constexpr (kModulate) {
      shv[i] = cuda::load_u4(shr + c * 8, c < nvec);
      scv[i] = cuda::load_u4(scr + c * 8, c < nvec);
    }
  };
  if constexpr (kEarlyTables) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) fetch_tables(i);
  }
  const float inv =
      rmsnorm_math::inv_rms(cuda::block_sum(rmsnorm_math::sum_squares(xv)), p.dim, p.eps);
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if constexpr (!kEarlyTables) fetch_tables(i);  // one vector at a time (register budget)
    if constexpr (!kResidual) {
      const uint4 y = rmsnorm_math::modulate8<kModulate>(xv[i], inv, wv[i], p.weight != nullptr,
                                                         shv[i], scv[i]);
      emit(c, y);
    } else {
      // Element by element in float32 with explicit roundings (same results); measured faster
      // than the packed form for the fused residual variant at the release width.
      float y[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float w = p.weight ? cuda::bf16_elem(wv[i], e) : 1.0f;
        y[e] = rbf(__fmul_rn(__fmul_rn(cuda::bf16_elem(xv[i], e), inv), w));
        if constexpr (kModulate) {
          const float sc = rbf(__fadd_rn(1.0f, cuda::bf16_elem(scv[i], e)));
          y[e] = rbf(__fadd_rn(rbf(__fmul_rn(y[e], sc)), cuda::bf16_elem(shv[i], e)));
        }
      }
      emit(c, cuda::pack_u4(y));
    }
  }
  if constexpr (kFuse == kFuseAmax) finish_amax_pass(amax16, p.nvfp4);
  if constexpr (kFuse == kFuseEncode) fused_scale_padding(p.nvfp4, p.rows, p.dim);
  if constexpr (kFuse == kFuseInt8) {
    const int64_t qs = p.int8.q_row_stride ? p.int8.q_row_stride : p.dim;
    const int k = static_cast<int>(p.dim);
    int8_detail::quantize_staged_row<kGroup>(
        int8_stage, k, int8_stage + int8_detail::staged_row_bytes(k), p.int8.q + row * qs,
        p.int8.scale + row, p.int8.rotate, p.int8.rotate_tiers);
  }
}

template <int kVec, int kFuse, int kGroup = 0>
void launch(const RmsNormModulateCudaParams& p, int threads, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.rows));
  const bool modulate = p.scale != nullptr;
  const size_t smem = kFuse == kFuseInt8 ? int8_detail::staged_row_bytes(p.dim) +
                                               int8_detail::staged_tile_bytes(kGroup, threads / 32)
                                         : 0;
  if (modulate && p.residual)
    rmsnorm_modulate_kernel<kVec, true, true, kFuse, kGroup><<<grid, threads, smem, stream>>>(p);
  else if (modulate)
    rmsnorm_modulate_kernel<kVec, true, false, kFuse, kGroup><<<grid, threads, smem, stream>>>(p);
  else if (p.residual)
    rmsnorm_modulate_kernel<kVec, false, true, kFuse, kGroup><<<grid, threads, smem, stream>>>(p);
  else
    rmsnorm_modulate_kernel<kVec, false, false, kFuse, kGroup><<<grid, threads, smem, stream>>>(p);
}

// The int8 output path: the kVec 3 kernel with the row staged for the group's rotation.
void launch_int8(const RmsNormModulateCudaParams& p, int threads, cudaStream_t stream) {
  switch (p.int8.group) {
    case 16:
      return launch<3, kFuseInt8, 16>(p, threads, stream);
    case 64:
      return launch<3, kFuseInt8, 64>(p, threads, stream);
    default:
      return launch<3, kFuseInt8, 256>(p, threads, stream);
  }
}

template <int kVec>
void launch_all(const RmsNormModulateCudaParams& p, int threads, cudaStream_t stream) {
  if (p.e4m3.enabled()) return launch<kVec, kFuseE4m3>(p, threads, stream);
  if (!p.nvfp4.enabled()) return launch<kVec, kFuseNone>(p, threads, stream);
  if (!p.nvfp4.computed()) return launch<kVec, kFuseEncode>(p, threads, stream);
  launch<kVec, kFuseAmax>(p, threads, stream);  // adds the residual to x, stores g
  RmsNormModulateCudaParams p2 = p;             // pass 2: plain norm of the updated x
  p2.residual = nullptr;
  p2.residual_gate = nullptr;
  launch<kVec, kFuseEncode>(p2, threads, stream);
}

int threads_for(int nvec, int vec) {
  return (((nvec + vec - 1) / vec) + 31) / 32 * 32;
}

}  // namespace

bool rmsnorm_modulate_int8_fusable(int64_t dim, int group) {
  return int8_fusable(dim, group) && dim <= kInt8MaxDim;
}

cudaError_t rmsnorm_modulate_cuda(const RmsNormModulateCudaParams& in, cudaStream_t stream) {
  RmsNormModulateCudaParams p = in;
  if (!p.x_row_stride) p.x_row_stride = p.dim;
  if (!p.y_row_stride) p.y_row_stride = p.dim;
  if (!p.residual_row_stride) p.residual_row_stride = p.dim;
  const bool nvfp4 = p.nvfp4.enabled(), int8 = p.int8.enabled(), e4m3 = p.e4m3.enabled();
  H3RT_CHECK(p.x && (p.y || nvfp4 || int8 || e4m3) && p.rows >= 0 && p.dim > 0,
             "rmsnorm_modulate_cuda: bad params");
  H3RT_CHECK(int(nvfp4) + int(int8) + int(e4m3) <= 1,
             "rmsnorm_modulate_cuda: the nvfp4, int8 and e4m3 outputs are exclusive");
  if (e4m3) check_e4m3_out(p.e4m3, "rmsnorm_modulate_cuda");
  if (nvfp4) check_nvfp4_out(p.nvfp4, "rmsnorm_modulate_cuda", p.dim, 4);
  if (int8) {
    check_int8_out(p.int8, "rmsnorm_modulate_cuda", p.dim);
    p.int8.rotate = int8_rotate_env(p.int8.rotate);
    H3RT_CHECK(p.dim <= kInt8MaxDim,
               "rmsnorm_modulate_cuda: int8 output needs dim <= ", kInt8MaxDim, ", got ", p.dim);
  }
  H3RT_CHECK(p.dim % 8 == 0 && p.dim <= 1024 * kMaxVec * 8, "rmsnorm_modulate_cuda: dim ", p.dim,
             " must be a multiple of 8 and at most ", 1024 * kMaxVec * 8);
  H3RT_CHECK((p.shift == nullptr) == (p.scale == nullptr),
             "rmsnorm_modulate_cuda: shift and scale come together");
  H3RT_CHECK(p.x_row_stride % 8 == 0 && p.y_row_stride % 8 == 0 && p.residual_row_stride % 8 == 0 &&
                 p.table_row_stride % 8 == 0,
             "rmsnorm_modulate_cuda: row strides must be multiples of 8 elements");
  H3RT_CHECK(cuda::aligned16(p.x) && cuda::aligned16(p.y) && cuda::aligned16(p.weight) &&
                 cuda::aligned16(p.shift) && cuda::aligned16(p.scale) &&
                 cuda::aligned16(p.residual) && cuda::aligned16(p.residual_gate),
             "rmsnorm_modulate_cuda: pointers must be 16-byte aligned");
  const bool modulate = p.scale != nullptr;
  H3RT_CHECK((!modulate && !p.residual_gate) || p.table_row_stride >= p.dim,
             "rmsnorm_modulate_cuda: table row stride ", p.table_row_stride, " < dim ", p.dim);
  if (p.rows == 0)
    return nvfp4 && p.nvfp4.computed()
               ? cudaMemsetAsync(p.nvfp4.global_scale, 0, sizeof(float), stream)
               : cudaSuccess;
  // 3 or 4 vectors per thread, whichever leaves fewer idle slots (5376 channels: 224 x 3).
  const int nvec = static_cast<int>(p.dim / 8);
  const int t3 = threads_for(nvec, 3), t4 = threads_for(nvec, 4);
  const bool vec3 = t3 <= kMaxThreads<3> && t3 * 3 - nvec <= t4 * 4 - nvec;
  if (int8)
    launch_int8(p, t3, stream);
  else if (vec3)
    launch_all<3>(p, t3, stream);
  else
    launch_all<4>(p, t4, stream);
  return H3RT_LAUNCH_CHECK("rmsnorm_modulate");
}

}  // namespace h3rt::ops
