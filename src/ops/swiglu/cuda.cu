// swiglu on the GPU (declared in swiglu.h): out = round(round(silu(gate)) * value) over the
// [gate | value] halves of each fc1 output row. One block per row, 16-byte vectors.
// exact_exp: bit-exact with swiglu_cpu, whose silu is g / (1 + expf(-g)) in float with the
// host's expf (glibc, <= 0.502 ulp). The reference value is exp(-g) evaluated in double and
// rounded to float, but that costs ~40 fp64 instructions per element, so it is taken only where
// the fast value could round differently: silu is first computed with the device expf (<= 2 ulp)
// and the approximate division (<= 2 ulp): e differs from the host's by <= 2.5 ulp, d = 1 + e by
// <= 3.5 ulp(d), so the quotient by <= 7 ulp(s) + 2 + 0.5 (<= 20 steps of the bit pattern even
// across a binade). Its bf16 rounding can differ from the reference's only if a bf16 rounding
// midpoint (low 16 bits 0x8000) lies within that distance, so values whose low 16 bits are
// within kGuard = 64 of the midpoint, and gates outside [2^-100, 64) (where s could be subnormal
// or exp overflow; inf/nan), are recomputed exactly: about 0.2% of the elements.
// The fast path (exact_exp = false) keeps the device expf and the IEEE division only.
// The table path (swiglu.h) replaces silu by a shared-memory lookup of the exact path's value
// (the whole table, or its compact form where that does not fit: kCompact); its int8 form also
// rotates and quantizes each row in shared memory.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "cuda/device_math.cuh"
#include "cuda/runtime.h"
#include "formats/nvfp4_quantize_fused.cuh"
#include "ops/int8_linear/rotate_quantize.cuh"
#include "ops/linear/e4m3_out.cuh"
#include "ops/swiglu/swiglu.h"

namespace h3rt::ops {

namespace {

using cuda::rbf;
using namespace nvfp4_detail;  // FusedMode, encode_pair_chunk, finish_amax_pass
using e4m3_detail::kFuseE4m3;  // out as e4m3 with the static scale (e4m3_out.h)

// Modes whose threads need no whole-warp trip count (no pair shuffle of the NVFP4 encoder).
constexpr bool per_thread(int fuse) {
  return fuse == kFuseNone || fuse == kFuseE4m3;
}

constexpr uint32_t kGuard = 64;

__device__ __forceinline__ float silu_double_exp(float g) {
  const float e = static_cast<float>(exp(-static_cast<double>(g)));
  return __fdiv_rn(g, __fadd_rn(1.0f, e));
}

// round_bf16(silu(g)) exactly as swiglu_cpu computes it.
__device__ __forceinline__ float silu_bf16_exact(float g) {
  const float s = __fdividef(g, __fadd_rn(1.0f, expf(-g)));
  const uint32_t abs_g = __float_as_uint(g) & 0x7fffffffu;
  const bool in_range = abs_g - 0x0d800000u < 0x42800000u - 0x0d800000u;  // 2^-100 <= |g| < 64
  const bool near_mid = (__float_as_uint(s) & 0xffffu) - (0x8000u - kGuard) <= 2 * kGuard;
  return rbf(in_range && !near_mid ? s : silu_double_exp(g));
}

__device__ __forceinline__ float silu_bf16_fast(float g) {
  return rbf(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))));
}

// kFuse (FusedMode): kFuseNone writes out; kFuseEncode encodes it to p.nvfp4 with g =
// *p.nvfp4.global_scale (writing out too if set); kFuseAmax reduces amax|out| only; kFuseE4m3
// writes out's e4m3 encoding to p.e4m3 (and out too if set). The NVFP4 variants run the same
// trip count in every thread (the pair shuffle needs the whole warp).
template <bool kExactExp, int kFuse>
__global__ void swiglu_kernel(SwigluCudaParams p) {
  const int64_t row = blockIdx.x;
  const int nvec = static_cast<int>(p.ffn / 8);
  const __nv_bfloat16* gr = p.in + row * p.in_row_stride;
  const __nv_bfloat16* vr = gr + p.ffn;
  __nv_bfloat16* orow = p.out + row * p.out_row_stride;
  const float gscale = kFuse == kFuseEncode ? *p.nvfp4.global_scale : 0.0f;
  const float e4m3_scale = kFuse == kFuseE4m3 ? *p.e4m3.scale : 1.0f;
  uint32_t amax16 = 0;
  const int end = per_thread(kFuse) ? nvec : (nvec + blockDim.x - 1) / blockDim.x * blockDim.x;
  for (int c = threadIdx.x; c < end; c += blockDim.x) {
    const bool active = per_thread(kFuse) || c < nvec;
    const uint4 gv = cuda::load_u4_stream(gr + c * 8, active);
    const uint4 vv = cuda::load_u4_stream(vr + c * 8, active);
    float o[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float g = cuda::bf16_elem(gv, e);
      const float s = kExactExp ? silu_bf16_exact(g) : silu_bf16_fast(g);
      o[e] = __fmul_rn(s, cuda::bf16_elem(vv, e));
    }
    const uint4 y = cuda::pack_u4(o);
    if constexpr (kFuse == kFuseNone) {
      cuda::store_u4(orow + c * 8, y);
    } else if constexpr (kFuse == kFuseEncode) {
      if (p.out && active) cuda::store_u4(orow + c * 8, y);
      encode_pair_chunk(y, active, gscale, p.nvfp4, row, c, p.ffn);
    } else if constexpr (kFuse == kFuseE4m3) {
      if (p.out) cuda::store_u4(orow + c * 8, y);
      e4m3_detail::store8(p.e4m3, row, p.ffn, c, y, e4m3_scale);
    } else {
      if (active) amax16 = max(amax16, absmax_bits16(y));
    }
  }
  if constexpr (kFuse == kFuseAmax) finish_amax_pass(amax16, p.nvfp4);
  if constexpr (kFuse == kFuseEncode) fused_scale_padding(p.nvfp4, p.rows, p.ffn);
}

__global__ void silu_table_kernel(uint16_t* table) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < kSiluTableEntries) {
    const float s = rbf(silu_double_exp(__uint_as_float(static_cast<uint32_t>(i) << 16)));
    table[i] = static_cast<uint16_t>(__float_as_uint(s) >> 16);
  }
}

constexpr int kTableThreads = 1024;
constexpr int kTableUnroll = 4;  // 16-byte vectors of gate and value per thread in flight

// Shared-memory bytes of the table in its whole (128 KB) or compact (8 KB, silu_table.h) form.
constexpr int table_bytes(bool compact) {
  return static_cast<int>(compact ? kSiluCompactEntries : kSiluTableEntries) * 2;
}

// One 16-byte vector of out (8 columns) from its gate and value vectors, silu from the table.
// The compact form loads every gate's slot first (all loads in flight together, as with the whole
// table) and applies the rules afterwards, in a branch that a warp rarely takes.
template <bool kCompact>
__device__ __forceinline__ uint4 swiglu8_table(const uint16_t* table, const uint4& gv,
                                               const uint4& vv) {
  const uint32_t gw[4] = {gv.x, gv.y, gv.z, gv.w};
  const uint32_t vw[4] = {vv.x, vv.y, vv.z, vv.w};
  const auto gate = [&](int e) { return e % 2 ? gw[e / 2] >> 16 : gw[e / 2] & 0xffffu; };
  float s[8];
  bool ruled = false;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const uint32_t g = gate(e);
    if constexpr (kCompact) ruled |= !silu_compact_kept(g);
    s[e] =
        __uint_as_float(static_cast<uint32_t>(table[kCompact ? silu_compact_index(g) : g]) << 16);
  }
  if (kCompact && ruled) {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (!silu_compact_kept(gate(e))) s[e] = __uint_as_float(silu_rule_bits(gate(e)) << 16);
  }
  uint32_t o[4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    o[j] = cuda::pack_bf2(__fmul_rn(s[2 * j], __uint_as_float(vw[j] << 16)),
                          __fmul_rn(s[2 * j + 1], __uint_as_float(vw[j] & 0xffff0000u)));
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// Copies the silu table (whole, or the compact form's two ranges of it) to shared memory (called
// by the whole CTA; a barrier must follow).
template <bool kCompact>
__device__ __forceinline__ void load_table(uint4* table4, const __nv_bfloat16* silu_table) {
  // A compact vector's 8 slots map to 8 consecutive gates (each sign's range starts at a multiple
  // of 8), so it copies whole table vector silu_compact_gate(8 i) / 8.
  const uint4* src = reinterpret_cast<const uint4*>(silu_table);
  for (int i = threadIdx.x; i < table_bytes(kCompact) / 16; i += blockDim.x)
    table4[i] = __ldg(src + (kCompact ? silu_compact_gate(8 * i) / 8 : i));
}

// Persistent: the table is copied to shared memory once per CTA, then the CTAs walk the 16-byte
// vectors of all rows (vector v = row * nvec + c) with a grid stride, kUnroll at a time.
// kFuse: kFuseNone writes out; kFuseEncode (given g) encodes it to p.nvfp4 (and writes out if
// set); kFuseE4m3 writes its e4m3 encoding to p.e4m3 (and out if set). Lanes 2i and 2i+1 then hold
// chunks 2m and 2m+1 of one row, the lane-pair layout of encode_pair_chunk: the CTA's first vector
// and the stride are even, and so is nvec (ffn % 16 == 0). The encoder shuffles across the warp, so
// the loop runs while any lane of the warp has work.
template <int kFuse, bool kCompact>
__global__ void __launch_bounds__(kTableThreads, 1)
    swiglu_table_kernel(SwigluCudaParams p, uint32_t nvec, uint32_t total) {
  // 4 spills with the encoder, and with the compact table's rules (64 registers at 1024 threads).
  constexpr int kUnroll = per_thread(kFuse) && !kCompact ? kTableUnroll : 2;
  extern __shared__ uint4 table4[];
  load_table<kCompact>(table4, p.silu_table);
  __syncthreads();
  const uint16_t* table = reinterpret_cast<const uint16_t*>(table4);
  const float gscale = kFuse == kFuseEncode ? *p.nvfp4.global_scale : 0.0f;
  const float e4m3_scale = kFuse == kFuseE4m3 ? *p.e4m3.scale : 1.0f;
  const uint32_t stride = gridDim.x * blockDim.x, step_r = stride / nvec, step_c = stride % nvec;
  uint32_t v = blockIdx.x * blockDim.x + threadIdx.x, row = v / nvec, c = v % nvec;
  const auto more = [&] { return per_thread(kFuse) ? v < total : __any_sync(~0u, v < total); };
  while (more()) {
    uint4 gv[kUnroll], vv[kUnroll];
    uint32_t at_row[kUnroll], at_c[kUnroll];
    bool ok[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      ok[k] = v < total;
      at_row[k] = row, at_c[k] = c;
      const __nv_bfloat16* g = p.in + int64_t(row) * p.in_row_stride + c * 8;
      gv[k] = cuda::load_u4_stream(g, ok[k]);
      vv[k] = cuda::load_u4_stream(g + p.ffn, ok[k]);
      v += stride, row += step_r, c += step_c;  // total + stride < 2^32 (checked by the launcher)
      if (c >= nvec) c -= nvec, ++row;
    }
    // Vector k of the batch, expanded with a constant k (a plain loop with the encoder inside was
    // left rolled, which put the batch arrays in local memory).
    const auto finish = [&](auto kc) {
      constexpr int k = decltype(kc)::value;
      const uint4 y = swiglu8_table<kCompact>(table, gv[k], vv[k]);
      if ((kFuse == kFuseNone || p.out) && ok[k])
        cuda::store_u4(p.out + int64_t(at_row[k]) * p.out_row_stride + at_c[k] * 8, y);
      if constexpr (kFuse == kFuseEncode)
        encode_pair_chunk(y, ok[k], gscale, p.nvfp4, at_row[k], at_c[k], p.ffn);
      if constexpr (kFuse == kFuseE4m3)
        if (ok[k]) e4m3_detail::store8(p.e4m3, at_row[k], p.ffn, at_c[k], y, e4m3_scale);
    };
    const auto finish_all = [&]<int... K>(std::integer_sequence<int, K...>) {
      (finish(std::integral_constant<int, K>{}), ...);
    };
    finish_all(std::make_integer_sequence<int, kUnroll>{});
  }
  if constexpr (kFuse == kFuseEncode) fused_scale_padding(p.nvfp4, p.rows, p.ffn);
}

// int8 convrot output (swiglu.h): the table path with the row staged in shared memory and
// rotated + quantized there by the whole CTA (int8_detail::quantize_staged_row, the standalone
// quantizer's operations). Persistent CTAs, one per SM: the table (kCompact: its compact form),
// the staged row and one transpose tile per warp fill the SM's shared memory. Each thread owns up
// to kInt8MaxVec vectors of a row (c = threadIdx.x + i * blockDim.x); the next row's gate and value
// vectors are loaded into registers before this row is rotated, so one row's reads overlap the
// previous row's rotation (the quantizer's work is instruction-bound, the loads are not).
constexpr int kInt8MaxVec = 4;
constexpr int kInt8MaxThreads = 512;

template <int G, bool kCompact>
__global__ void __launch_bounds__(kInt8MaxThreads, 1) swiglu_int8_table_kernel(SwigluCudaParams p) {
  extern __shared__ __align__(16) unsigned char smem[];  // table | staged row | transpose tiles
  load_table<kCompact>(reinterpret_cast<uint4*>(smem), p.silu_table);
  const uint16_t* table = reinterpret_cast<const uint16_t*>(smem);
  unsigned char* const stage = smem + table_bytes(kCompact);
  const int k = static_cast<int>(p.ffn), nvec = k / 8;
  unsigned char* const tiles = stage + int8_detail::staged_row_bytes(k);
  const int64_t qs = p.int8.q_row_stride ? p.int8.q_row_stride : p.ffn;
  uint4 gv[kInt8MaxVec], vv[kInt8MaxVec];
  const auto load = [&](int64_t row) {
    const __nv_bfloat16* gr = p.in + row * p.in_row_stride;
#pragma unroll
    for (int i = 0; i < kInt8MaxVec; ++i) {
      const int c = threadIdx.x + i * blockDim.x;
      const bool ok = row < p.rows && c < nvec;
      gv[i] = cuda::load_u4_stream(gr + c * 8, ok);
      vv[i] = cuda::load_u4_stream(gr + p.ffn + c * 8, ok);
    }
  };
  int64_t row = blockIdx.x;
  load(row);
  __syncthreads();  // the table
  for (; row < p.rows; row += gridDim.x) {
#pragma unroll
    for (int i = 0; i < kInt8MaxVec; ++i) {
      const int c = threadIdx.x + i * blockDim.x;
      if (c < nvec) {
        const uint4 y = swiglu8_table<kCompact>(table, gv[i], vv[i]);
        if (p.out) cuda::store_u4(p.out + row * p.out_row_stride + c * 8, y);
        *reinterpret_cast<uint4*>(stage + int8_detail::staged_offset(c * 8)) = y;
      }
    }
    load(row + gridDim.x);
    int8_detail::quantize_staged_row<G>(stage, k, tiles, p.int8.q + row * qs, p.int8.scale + row,
                                        p.int8.rotate, p.int8.rotate_tiers);
  }
}

// H3RT_SWIGLU_TABLE=compact: the compact table wherever the table path runs (tests, timings).
bool compact_forced() {
  const char* e = std::getenv("H3RT_SWIGLU_TABLE");
  if (!e || !*e || !std::strcmp(e, "auto")) return false;
  if (!std::strcmp(e, "compact")) return true;
  H3RT_FAIL("H3RT_SWIGLU_TABLE=", e, ": expected compact or auto, or unset");
}

// Threads of the int8 table kernel for ffn and group G with the table in the given form and `smem`
// bytes of shared memory per block (0: it cannot run): the most warps (<= 16) whose transpose
// tiles fit beside the table and the staged row, at least 4, and enough for kInt8MaxVec vectors
// per thread.
constexpr int int8_table_threads(int64_t ffn, int group, bool compact, int64_t smem) {
  if (!int8_fusable(ffn, group) || ffn > kInt8MaxVec * kInt8MaxThreads * 8) return 0;
  const int64_t left = smem - table_bytes(compact) - int8_detail::staged_row_bytes(ffn) -
                       int8_detail::kStagedStaticBytes;
  const int64_t tile = int8_detail::staged_tile_bytes(group, 1), most = kInt8MaxThreads / 32;
  const int64_t warps = tile ? std::min(most, left / tile) : most;
  const int64_t need = (ffn / 8 + kInt8MaxVec * 32 - 1) / (kInt8MaxVec * 32);  // warps
  return left > 0 && warps >= std::max<int64_t>(4, need) ? static_cast<int>(warps * 32) : 0;
}
// The release's fc2 input (ffn 14336, G 256): 16 warps beside the whole table in Hopper's 227 KB;
// on the 12.x GPUs (99 KB per block) the whole table does not fit and the compact one leaves
// room for 14 warps, exactly the 14 the row's 1,792 vectors need at 4 per thread.
static_assert(int8_table_threads(14336, 256, false, 227 * 1024) == 512);
static_assert(int8_table_threads(14336, 256, false, 99 * 1024) == 0);
static_assert(int8_table_threads(14336, 256, true, 99 * 1024) == 14 * 32);

int int8_table_threads(int64_t ffn, int group, bool compact) {
  int dev = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  return int8_table_threads(ffn, group, compact, cuda::smem_optin(dev));
}

// The int8 kernel's threads and table form: the whole table where it fits, else the compact one.
std::pair<int, bool> int8_table_plan(int64_t ffn, int group) {
  const bool forced = compact_forced();
  const int whole = forced ? 0 : int8_table_threads(ffn, group, false);
  return whole ? std::make_pair(whole, false)
               : std::make_pair(int8_table_threads(ffn, group, true), true);
}

template <int G, bool kCompact>
cudaError_t launch_int8(const SwigluCudaParams& p, int threads, cudaStream_t stream) {
  const size_t smem = table_bytes(kCompact) + int8_detail::staged_row_bytes(p.ffn) +
                      int8_detail::staged_tile_bytes(G, threads / 32);
  const void* fn = reinterpret_cast<const void*>(&swiglu_int8_table_kernel<G, kCompact>);
  const int resident = cuda::resident_grid(fn, threads, smem, 0);
  H3RT_CHECK(resident > 0, "swiglu_cuda: the int8 output's ", smem,
             " bytes of shared memory per CTA do not fit this device");
  const int64_t grid = std::min<int64_t>(p.rows, resident);
  swiglu_int8_table_kernel<G, kCompact><<<static_cast<unsigned>(grid), threads, smem, stream>>>(p);
  return H3RT_LAUNCH_CHECK("swiglu (int8 output)");
}

template <int G>
cudaError_t launch_int8(const SwigluCudaParams& p, std::pair<int, bool> plan, cudaStream_t stream) {
  return plan.second ? launch_int8<G, true>(p, plan.first, stream)
                     : launch_int8<G, false>(p, plan.first, stream);
}

// The grid of table kernel `kernel` with `smem` bytes of table (0 where it cannot run: too little
// shared memory, too many vectors); sets its shared-memory attribute.
int table_grid(const SwigluCudaParams& p, const void* kernel, int smem) {
  const int64_t total = p.rows * (p.ffn / 8);
  if (total >= (int64_t{1} << 31)) return 0;
  const int grid = cuda::resident_grid(kernel, kTableThreads, smem, 8);
  return static_cast<int>(std::min<int64_t>(grid, (total + kTableThreads - 1) / kTableThreads));
}

// The table kernel for output mode kFuse, whole table where it fits, else compact; false where
// neither can run.
template <int kFuse>
bool launch_table(const SwigluCudaParams& p, cudaStream_t stream) {
  const uint32_t nvec = static_cast<uint32_t>(p.ffn / 8);
  const uint32_t total = static_cast<uint32_t>(p.rows) * nvec;
  const void* whole = reinterpret_cast<const void*>(swiglu_table_kernel<kFuse, false>);
  const int wgrid = compact_forced() ? 0 : table_grid(p, whole, table_bytes(false));
  if (wgrid > 0) {
    swiglu_table_kernel<kFuse, false>
        <<<wgrid, kTableThreads, table_bytes(false), stream>>>(p, nvec, total);
    return true;
  }
  const void* compact = reinterpret_cast<const void*>(swiglu_table_kernel<kFuse, true>);
  const int cgrid = table_grid(p, compact, table_bytes(true));
  if (cgrid > 0)
    swiglu_table_kernel<kFuse, true>
        <<<cgrid, kTableThreads, table_bytes(true), stream>>>(p, nvec, total);
  return cgrid > 0;
}

template <int kFuse>
void launch(const SwigluCudaParams& p, int threads, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(p.rows);
  if (p.exact_exp)
    swiglu_kernel<true, kFuse><<<grid, threads, 0, stream>>>(p);
  else
    swiglu_kernel<false, kFuse><<<grid, threads, 0, stream>>>(p);
}

}  // namespace

bool swiglu_int8_fusable(int64_t ffn, int group) {
  return int8_table_plan(ffn, group).first > 0;
}

cudaError_t swiglu_cuda(const SwigluCudaParams& in, cudaStream_t stream) {
  SwigluCudaParams p = in;
  if (!p.in_row_stride) p.in_row_stride = 2 * p.ffn;
  if (!p.out_row_stride) p.out_row_stride = p.ffn;
  const bool nvfp4 = p.nvfp4.enabled(), e4m3 = p.e4m3.enabled(), int8 = p.int8.enabled();
  H3RT_CHECK(p.in && (p.out || nvfp4 || e4m3 || int8) && p.rows >= 0 && p.ffn > 0,
             "swiglu_cuda: bad params");
  H3RT_CHECK(int(nvfp4) + int(e4m3) + int(int8) <= 1,
             "swiglu_cuda: the nvfp4, e4m3 and int8 outputs are exclusive");
  if (nvfp4) check_nvfp4_out(p.nvfp4, "swiglu_cuda", p.ffn, 4);
  if (e4m3) check_e4m3_out(p.e4m3, "swiglu_cuda");
  if (int8) {
    check_int8_out(p.int8, "swiglu_cuda", p.ffn);
    p.int8.rotate = int8_rotate_env(p.int8.rotate);
    H3RT_CHECK(p.silu_table, "swiglu_cuda: the int8 output needs the silu table");
  }
  H3RT_CHECK(p.ffn % 8 == 0 && p.in_row_stride % 8 == 0 && p.out_row_stride % 8 == 0,
             "swiglu_cuda: ffn ", p.ffn, " and row strides must be multiples of 8");
  H3RT_CHECK(p.in_row_stride >= 2 * p.ffn, "swiglu_cuda: input row stride < 2*ffn");
  H3RT_CHECK(cuda::aligned16(p.in) && cuda::aligned16(p.out) && cuda::aligned16(p.silu_table),
             "swiglu_cuda: pointers must be 16-byte aligned");
  if (p.rows == 0)
    return nvfp4 && p.nvfp4.computed()
               ? cudaMemsetAsync(p.nvfp4.global_scale, 0, sizeof(float), stream)
               : cudaSuccess;
  if (int8) {
    const std::pair<int, bool> plan = int8_table_plan(p.ffn, p.int8.group);
    H3RT_CHECK(plan.first > 0, "swiglu_cuda: the int8 output does not fit this device at ffn ",
               p.ffn,
               " (the silu table, the staged row and the transpose tiles share one CTA's "
               "shared memory; ffn <= ",
               kInt8MaxVec * kInt8MaxThreads * 8, ")");
    switch (p.int8.group) {
      case 16:
        return launch_int8<16>(p, plan, stream);
      case 64:
        return launch_int8<64>(p, plan, stream);
      default:
        return launch_int8<256>(p, plan, stream);
    }
  }
  const int nvec = static_cast<int>(p.ffn / 8);
  const int threads = std::min(256, (nvec + 31) / 32 * 32);
  // The table path takes a given NVFP4 scale; a computed one needs the row kernel's amax pass.
  const bool table = p.silu_table && !(nvfp4 && p.nvfp4.computed()) &&
                     (nvfp4  ? launch_table<kFuseEncode>(p, stream)
                      : e4m3 ? launch_table<kFuseE4m3>(p, stream)
                             : launch_table<kFuseNone>(p, stream));
  if (table) return H3RT_LAUNCH_CHECK("swiglu");
  if (e4m3) {
    launch<kFuseE4m3>(p, threads, stream);
  } else if (!nvfp4) {
    launch<kFuseNone>(p, threads, stream);
  } else if (!p.nvfp4.computed()) {
    launch<kFuseEncode>(p, threads, stream);
  } else {
    launch<kFuseAmax>(p, threads, stream);  // stores g
    launch<kFuseEncode>(p, threads, stream);
  }
  return H3RT_LAUNCH_CHECK("swiglu");
}

cudaError_t swiglu_silu_table_cuda(__nv_bfloat16* table, cudaStream_t stream) {
  H3RT_CHECK(table && cuda::aligned16(table),
             "swiglu_silu_table_cuda: table must be 16-byte aligned");
  silu_table_kernel<<<kSiluTableEntries / 256, 256, 0, stream>>>(
      reinterpret_cast<uint16_t*>(table));
  return H3RT_LAUNCH_CHECK("swiglu silu table");
}

}  // namespace h3rt::ops
