// Rotate + quantize int8 rows on the GPU (see int8_linear.h for the rule and the exactness
// argument): the team kernel (warps own row slices, TMA-staged, one row per team at a time, no
// block-wide barrier when a row fits one warp), the older block register kernel, and a literal
// shared-memory one for everything else.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "cuda/runtime.h"
#include "ops/int8_linear/int8_linear.h"
#include "ops/int8_linear/int8_math.cuh"
#include "ops/int8_linear/rotate_quantize.cuh"

namespace h3rt::ops {
namespace {

using namespace int8_detail;  // the exact steps (rotate_quantize.cuh)

constexpr int kMaxFastK = 16384;     // 1024 threads x 16 columns
constexpr int kTileWords = 32 * 17;  // per-warp transpose tile: 32 lanes x 16 words, pitch 17
constexpr int kGenericThreads = 256;

// ---- the register kernel's quantizer step -------------------------------------------------

// to_int8(bf16(v / sb)) with the quotient as v * rcp (see the header for why the bits agree).
__device__ __forceinline__ int quantize1(float v, float rcp) {
  const float r = rintf(bf16_value(bf16_bits(__fmul_rn(v, rcp))));
  return static_cast<int>(fminf(fmaxf(r, -128.0f), 127.0f));
}

// ---- register kernel ----------------------------------------------------------------------

__device__ __forceinline__ void load_row(const Int8QuantizeCudaParams& p, int64_t r, bool active,
                                         uint4 (&raw)[2]) {
  raw[0] = raw[1] = make_uint4(0, 0, 0, 0);
  if (active && r < p.rows) {
    const uint4* src =
        reinterpret_cast<const uint4*>(p.x + r * p.x_row_stride + int64_t(threadIdx.x) * 16);
    raw[0] = __ldcs(src);
    raw[1] = __ldcs(src + 1);
  }
}

// bf16 bits -> double times 2^-896, exactly, by placing the bits (header).
__device__ __forceinline__ double scaled_double(uint32_t w, bool high) {
  const uint32_t hi = high ? ((w >> 3) & 0x0fffe000u) | (w & 0x80000000u)
                           : ((w & 0x7fffu) << 13) | ((w & 0x8000u) << 16);
  return __hiloint2double(static_cast<int>(hi), 0);
}

// Transposes the 16 doubles of each lane through the warp tile: lane L writes word c of row L,
// then reads the words `src(c)` names (row, column). Two passes of 32-bit halves.
template <class Src>
__device__ __forceinline__ void transpose(double (&a)[16], uint32_t* tile, int lane, Src src) {
  double b[16];
  uint32_t hi[16];  // the high words, kept until the low ones arrive
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int c = 0; c < 16; ++c)
      tile[lane * 17 + c] = half ? __double2loint(a[c]) : __double2hiint(a[c]);
    __syncwarp();
#pragma unroll
    for (int c = 0; c < 16; ++c) {
      const uint32_t v = tile[src(c)];
      if (half)
        b[c] = __hiloint2double(static_cast<int>(hi[c]), static_cast<int>(v));
      else
        hi[c] = v;
    }
    __syncwarp();
  }
#pragma unroll
  for (int c = 0; c < 16; ++c) a[c] = b[c];
}

// Rotates the 16 columns of this thread (values in `raw`) and returns their bf16 bits in column
// order (8 words, two columns each).
template <int G>
__device__ __forceinline__ void rotate(const uint4 (&raw)[2], uint32_t (&out)[8], uint32_t* tile,
                                       int lane) {
  const uint32_t w[8] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w,
                         raw[1].x, raw[1].y, raw[1].z, raw[1].w};
  if constexpr (G == 0) {
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = w[i];
  } else {
    double a[16];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      a[2 * i] = scaled_double(w[i], false);
      a[2 * i + 1] = scaled_double(w[i], true);
    }
    stage16<1>(a);
    if constexpr (G >= 16) stage16<4>(a);
    // G = 64: lane 4g + u takes columns 16 d2 + 4u + d0 (slot 4 d2 + d0) of group g;
    // G = 256: lane 16g + u takes columns 16 d + u (slot d).
    if constexpr (G == 64) {
      const int g0 = lane & ~3, u = lane & 3;
      transpose(a, tile, lane, [&](int j) { return (g0 + j / 4) * 17 + 4 * u + j % 4; });
      stage16<4>(a);
    } else if constexpr (G == 256) {
      const int g0 = lane & ~15, u = lane & 15;
      transpose(a, tile, lane, [&](int j) { return (g0 + j) * 17 + u; });
      stage16<1>(a);
      stage16<4>(a);
    }
    const double back = __hiloint2double((1023 + 896 - half_log2(G)) << 20, 0);  // 2^(896-m)
    uint32_t b[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) b[j] = bf16_bits(__double2float_rn(__dmul_rn(a[j], back)));
    if constexpr (G <= 16) {
#pragma unroll
      for (int i = 0; i < 8; ++i) out[i] = b[2 * i] | (b[2 * i + 1] << 16);
    } else {
      // Back to column order through the tile as u16 (16 bytes of padding per 256 columns).
      auto* t16 = reinterpret_cast<uint16_t*>(tile);
      auto at = [](int col) { return col + (col / 256) * 8; };  // warp-local column -> u16 slot
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        int col;
        if constexpr (G == 64)
          col = (lane & ~3) * 16 + 16 * (j / 4) + 4 * (lane & 3) + j % 4;
        else
          col = (lane & ~15) * 16 + 16 * j + (lane & 15);
        t16[at(col)] = static_cast<uint16_t>(b[j]);
      }
      __syncwarp();
      const uint4* src = reinterpret_cast<const uint4*>(t16 + at(lane * 16));
      const uint4 v0 = src[0], v1 = src[1];
      out[0] = v0.x, out[1] = v0.y, out[2] = v0.z, out[3] = v0.w;
      out[4] = v1.x, out[5] = v1.y, out[6] = v1.z, out[7] = v1.w;
      __syncwarp();
    }
  }
}

// Max over the CTA of per-thread bf16 magnitudes (bits; ordered like the values).
__device__ __forceinline__ uint32_t block_max_bits(uint32_t m, uint32_t* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  if (lane == 0) red[warp] = m;
  __syncthreads();
  uint32_t t = lane < nwarps ? red[lane] : 0u;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t = max(t, __shfl_xor_sync(0xffffffffu, t, o));
  __syncthreads();  // red is rewritten by the next row
  return t;
}

template <int G>
__global__ void __launch_bounds__(1024) quantize_fast_kernel(Int8QuantizeCudaParams p) {
  extern __shared__ uint32_t smem[];  // per-warp tiles (G >= 64)
  __shared__ uint32_t red[32];
  const int lane = threadIdx.x & 31;
  uint32_t* tile = smem + (threadIdx.x >> 5) * kTileWords;
  const bool active = threadIdx.x < p.k / 16;
  uint4 next[2];
  load_row(p, blockIdx.x, active, next);
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const uint4 cur[2] = {next[0], next[1]};
    load_row(p, r + gridDim.x, active, next);  // in flight while this row is rotated
    uint32_t v[8];
    rotate<G>(cur, v, tile, lane);
    uint32_t m = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) m = __vmaxu2(m, v[i] & 0x7fff7fffu);
    m = max(m & 0xffffu, m >> 16);
    const float amax = bf16_value(block_max_bits(m, red));
    const float s = row_scale(amax);
    const float rcp = __frcp_rn(bf16_value(bf16_bits(s)));
    if (threadIdx.x == 0) p.scale[r] = s;
    if (active) {
      uint32_t packed[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t word = 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const uint32_t pair = v[2 * i + e / 2];
          const float f = bf16_value((e & 1) ? pair >> 16 : pair & 0xffffu);
          word |= (static_cast<uint32_t>(quantize1(f, rcp)) & 0xffu) << (8 * e);
        }
        packed[i] = word;
      }
      *reinterpret_cast<uint4*>(p.q + r * p.q_row_stride + int64_t(threadIdx.x) * 16) =
          make_uint4(packed[0], packed[1], packed[2], packed[3]);
    }
  }
}

// ---- team kernel ---------------------------------------------------------------------------
// See int8_linear.h ("Paths") for the design. A CTA is one team of W warps that owns one row at
// a time; warp w owns the 512-column units [w * U / W, (w + 1) * U / W) of every row (U = the
// row's units, the last one possibly partial). Per warp: two TMA stages holding its slice of the
// current and the next row (256-column pieces at a pitch of 544 bytes), the transpose tile
// (G >= 64) and two mbarriers. The rotated bf16 values overwrite the staged input in place.

constexpr int kTeamMaxWarps = 16;
__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.b32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
// Orders this thread's generic-proxy shared accesses before later async-proxy (TMA) ones.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
#endif

template <int G>
__global__ void __launch_bounds__(kTeamMaxWarps * 32, 1)
    quantize_team_kernel(Int8QuantizeCudaParams p, int units, int warp_units) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char team_smem[];
  __shared__ uint32_t red[2][kTeamMaxWarps];
  __shared__ __align__(8) uint64_t bars[kTeamMaxWarps][2];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int u0 = warp * units / nwarps, nu = (warp + 1) * units / nwarps - u0;
  const int stage_bytes = warp_units * kUnitPitch;
  unsigned char* const mine =
      team_smem + size_t(warp) * (2 * stage_bytes + (G >= 64 ? kTile64Bytes : 0));
  double* const tile2 = reinterpret_cast<double*>(mine + 2 * stage_bytes);
  const int64_t c0 = int64_t(u0) * kUnitCols;                 // this warp's columns
  const int64_t c1 = min(int64_t(u0 + nu) * kUnitCols, p.k);  // [c0, c1)
  const int pieces = static_cast<int>((c1 - c0 + 255) / 256);
  const uint32_t bytes = static_cast<uint32_t>(c1 - c0) * 2;  // a multiple of 32 (k % 16 == 0)
  const uint32_t piece_bytes =
      lane < pieces ? static_cast<uint32_t>(min(int64_t(256), c1 - c0 - 256 * lane)) * 2 : 0;
  // This lane's 16 columns of a unit: piece lane / 16, 32 bytes each; valid in the units below
  // lane_units (the last unit of the row may be partial).
  const int lane_off = (lane >> 4) * kPiecePitch + (lane & 15) * 32;
  const int64_t lane_cols = c1 - c0 - 16 * lane;
  const int lane_units =
      lane_cols > 0 ? static_cast<int>((lane_cols + kUnitCols - 1) / kUnitCols) : 0;
  const uint32_t bar0 = smem_u32(&bars[warp][0]);
  if (lane == 0) {
    mbar_init(bar0, 1);
    mbar_init(bar0 + 8, 1);
    mbar_init_fence();
  }
  __syncwarp();
  // Stage s <- this warp's slice of row r. Every lane's earlier shared accesses to stage s are
  // ordered before the copies (fence, then the warp barrier).
  auto issue = [&](int64_t r, int s) {
    fence_proxy_async();
    __syncwarp();
    const uint32_t bar = bar0 + 8 * s;
    if (lane == 0) mbar_arrive_expect_tx(bar, bytes);
    __syncwarp();
    if (lane < pieces)
      bulk_load(smem_u32(mine + s * stage_bytes + lane * kPiecePitch),
                p.x + r * p.x_row_stride + c0 + 256 * lane, piece_bytes, bar);
  };
  const bool integer = integer_rotation(p.rotate);
  int64_t r = blockIdx.x;
  if (r < p.rows) issue(r, 0);
  for (uint32_t i = 0; r < p.rows; ++i, r += gridDim.x) {
    const int s = static_cast<int>(i & 1);
    if (r + gridDim.x < p.rows) issue(r + gridDim.x, s ^ 1);  // in flight during this row
    while (!mbar_try_wait(bar0 + 8 * s, (i >> 1) & 1)) {
    }
    unsigned char* const stage = mine + s * stage_bytes;
    float mf = 0.0f;  // max |value| of this lane
    uint32_t mb = 0;  // G = 0: max bf16 magnitude bits, two lanes of 16 bits
    unsigned char* unit = stage;
    for (int u = 0; u < nu; ++u, unit += kUnitPitch) {
      const uint4* own = reinterpret_cast<const uint4*>(unit + lane_off);
      uint4 raw[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
      if (u < lane_units) {
        raw[0] = own[0];
        raw[1] = own[1];
      }
      if constexpr (G == 0) {
        mb = __vmaxu2(mb, raw[0].x & 0x7fff7fffu);
        mb = __vmaxu2(mb, raw[0].y & 0x7fff7fffu);
        mb = __vmaxu2(mb, raw[0].z & 0x7fff7fffu);
        mb = __vmaxu2(mb, raw[0].w & 0x7fff7fffu);
        mb = __vmaxu2(mb, raw[1].x & 0x7fff7fffu);
        mb = __vmaxu2(mb, raw[1].y & 0x7fff7fffu);
        mb = __vmaxu2(mb, raw[1].z & 0x7fff7fffu);
        mb = __vmaxu2(mb, raw[1].w & 0x7fff7fffu);
      } else {
        // zeros (idle lanes) rotate to zeros
        rotate_unit<G>(raw, unit, tile2, lane, mf, integer, p.rotate_tiers);
      }
    }
    if constexpr (G == 0) mf = bf16_value(max(mb & 0xffffu, mb >> 16));
    uint32_t m = __float_as_uint(mf);  // non-negative floats order like their bits
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (nwarps > 1) {
      // red[s] is rewritten two rows later, after every warp has passed the next row's barrier.
      if (lane == 0) red[s][warp] = m;
      __syncthreads();
      for (int v = 0; v < nwarps; ++v) m = max(m, red[s][v]);
    } else {
      __syncwarp();  // the scattered bf16 values of other lanes are visible below
    }
    const float amax = bf16_value(bf16_bits_finite(__uint_as_float(m)));
    const float sc = row_scale(amax);
    const float rcp = __frcp_rn(bf16_value(bf16_bits(sc)));
    if (threadIdx.x == 0) p.scale[r] = sc;
    int8_t* qcol = p.q + r * p.q_row_stride + c0 + lane * 16;
    unit = stage + lane_off;
    for (int u = 0; u < lane_units; ++u, unit += kUnitPitch, qcol += kUnitCols) {
      const uint4* own = reinterpret_cast<const uint4*>(unit);
      const uint4 v[2] = {own[0], own[1]};
      *reinterpret_cast<uint4*>(qcol) = quantize16(v, rcp);
    }
  }
#else
  (void)p;
  (void)units;
  (void)warp_units;
  __trap();  // never launched: the host checks the function's PTX version
#endif
}

// ---- shared-memory kernel: the host loop, literally ---------------------------------------

__device__ __forceinline__ float block_max_f(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = lane < kGenericThreads / 32 ? red[lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));
  return t;
}

__global__ void __launch_bounds__(kGenericThreads)
    quantize_generic_kernel(Int8QuantizeCudaParams p) {
  extern __shared__ double buf[];  // the row, k doubles
  __shared__ float red[kGenericThreads / 32];
  const int64_t r = blockIdx.x, k = p.k, g = p.group;
  const __nv_bfloat16* x = p.x + r * p.x_row_stride;
  for (int64_t c = threadIdx.x; c < k; c += kGenericThreads) buf[c] = __bfloat162float(x[c]);
  if (g > 0) {
    for (int64_t s = 1; s < g; s *= 4) {
      __syncthreads();
      for (int64_t b = threadIdx.x; b < k / 4; b += kGenericThreads) {
        const int64_t base = (b / (g / 4)) * g, bi = b % (g / 4);
        const int64_t t = base + (bi / s) * 4 * s + bi % s;
        const double a0 = buf[t], a1 = buf[t + s], a2 = buf[t + 2 * s], a3 = buf[t + 3 * s];
        buf[t] = a0 + a1 + a2 - a3;
        buf[t + s] = a0 + a1 - a2 + a3;
        buf[t + 2 * s] = a0 - a1 + a2 + a3;
        buf[t + 3 * s] = -a0 + a1 + a2 + a3;
      }
    }
    __syncthreads();
    const double inv = __hiloint2double((1023 - half_log2(static_cast<int>(g))) << 20, 0);
    for (int64_t c = threadIdx.x; c < k; c += kGenericThreads)
      buf[c] = bf16_value(bf16_bits(__double2float_rn(buf[c] * inv)));
  }
  float m = 0.0f;
  for (int64_t c = threadIdx.x; c < k; c += kGenericThreads)
    m = fmaxf(m, fabsf(static_cast<float>(buf[c])));
  const float s = row_scale(block_max_f(m, red));
  const float sb = bf16_value(bf16_bits(s));
  if (threadIdx.x == 0) p.scale[r] = s;
  int8_t* q = p.q + r * p.q_row_stride;
  for (int64_t c = threadIdx.x; c < k; c += kGenericThreads) {
    const float v = static_cast<float>(buf[c]);  // a bf16 value, exact
    const float t = rintf(bf16_value(bf16_bits(__fdiv_rn(v, sb))));
    q[c] = static_cast<int8_t>(fminf(fmaxf(t, -128.0f), 127.0f));
  }
}

template <int G>
cudaError_t launch_fast(const Int8QuantizeCudaParams& p, cudaStream_t stream) {
  const int threads = static_cast<int>((p.k / 16 + 31) / 32 * 32);
  const size_t smem = G >= 64 ? size_t(threads / 32) * kTileWords * 4 : 0;
  const void* fn = reinterpret_cast<const void*>(&quantize_fast_kernel<G>);
  const int resident = cuda::resident_grid(fn, threads, smem, 0);
  const int grid = static_cast<int>(std::min<int64_t>(p.rows, std::max(resident, 1)));
  quantize_fast_kernel<G><<<grid, threads, smem, stream>>>(p);
  return H3RT_LAUNCH_CHECK("int8 quantize (register kernel)");
}

bool valid_group(int g) {
  if (g < 4) return false;
  while (g % 4 == 0) g /= 4;
  return g == 1;
}

// ---- team kernel launch ---------------------------------------------------------------------

struct TeamPlan {
  bool ok = false;
  int warps = 0, warp_units = 0, grid = 0;  // grid: resident CTAs on the device
  size_t smem = 0;
};

size_t team_smem_bytes(int group, int warps, int warp_units) {
  return size_t(warps) * (2 * size_t(warp_units) * kUnitPitch + (group >= 64 ? kTile64Bytes : 0));
}

const void* team_kernel(int group) {
  switch (group) {
    case 0:
      return reinterpret_cast<const void*>(&quantize_team_kernel<0>);
    case 4:
      return reinterpret_cast<const void*>(&quantize_team_kernel<4>);
    case 16:
      return reinterpret_cast<const void*>(&quantize_team_kernel<16>);
    case 64:
      return reinterpret_cast<const void*>(&quantize_team_kernel<64>);
    default:
      return reinterpret_cast<const void*>(&quantize_team_kernel<256>);
  }
}

// Team size for k columns: 4, 3, 2 or 1 units (512 columns) per warp, W = ceil(units / per)
// warps. Shared memory bounds the resident CTAs (two stages per warp, plus the transpose tile);
// the split kept maximizes min(resident warps per SM, 20) (enough to keep the pipes busy), then
// the bytes in flight per SM (one stage per warp: the next row). Cached per device, group and k.
// Not ok below compute capability 9.0 (TMA), when this build has no sm_90+ code for the device,
// or when no split fits.
TeamPlan team_plan(int group, int64_t k) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int64_t>, TeamPlan> cache;
  int dev = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(dev, group, k);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  TeamPlan best;
  const void* fn = team_kernel(group);
  cudaFuncAttributes attr{};
  int major = 0, sms = 1, optin = 0;
  H3RT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  H3RT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  H3RT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const bool code =
      major >= 9 && cudaFuncGetAttributes(&attr, fn) == cudaSuccess && attr.ptxVersion >= 90;
  const int units = static_cast<int>((k + kUnitCols - 1) / kUnitCols);
  int64_t best_score = 0;
  for (int per = 4; code && per >= 1; --per) {
    const int warps = (units + per - 1) / per;
    if (warps > kTeamMaxWarps) break;
    const int warp_units = (units + warps - 1) / warps;
    const size_t smem = team_smem_bytes(group, warps, warp_units);
    if (smem + 1024 > size_t(optin)) continue;  // room for the static shared memory too
    const int grid = cuda::resident_grid(fn, warps * 32, smem, 9);
    const int64_t ctas = grid / std::max(sms, 1);
    const int64_t score = std::min<int64_t>(ctas * warps, 20) * (int64_t(1) << 32) +
                          ctas * warps * warp_units * kUnitPitch;
    if (grid > 0 && score > best_score) {
      best_score = score;
      best = {true, warps, warp_units, grid, smem};
    }
  }
  cache[key] = best;
  return best;
}

template <int G>
cudaError_t launch_team(const Int8QuantizeCudaParams& p, const TeamPlan& plan,
                        cudaStream_t stream) {
  const int units = static_cast<int>((p.k + kUnitCols - 1) / kUnitCols);
  H3RT_CUDA_CHECK(cudaFuncSetAttribute(&quantize_team_kernel<G>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(plan.smem)));
  const int grid = static_cast<int>(std::min<int64_t>(p.rows, plan.grid));
  quantize_team_kernel<G><<<grid, plan.warps * 32, plan.smem, stream>>>(p, units, plan.warp_units);
  return H3RT_LAUNCH_CHECK("int8 quantize (team kernel)");
}

// The shapes the register kernels take: 16-byte rows and vectors, a group they unroll.
bool register_kernel_fits(const Int8QuantizeCudaParams& p) {
  return p.k % 16 == 0 && p.k <= kMaxFastK && p.x_row_stride % 8 == 0 && p.q_row_stride % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.q) % 16 == 0 &&
         (p.group == 0 || p.group == 4 || p.group == 16 || p.group == 64 || p.group == 256);
}

Int8QuantizePath env_path() {
  const char* e = std::getenv("H3RT_INT8_QUANT");
  if (!e || !*e) return Int8QuantizePath::kAuto;
  if (!std::strcmp(e, "team")) return Int8QuantizePath::kTeam;
  if (!std::strcmp(e, "block")) return Int8QuantizePath::kBlock;
  if (!std::strcmp(e, "generic")) return Int8QuantizePath::kGeneric;
  H3RT_FAIL("H3RT_INT8_QUANT=", e, ": expected team, block or generic, or unset for automatic");
}

// p with the row strides and the rotation form filled in.
Int8QuantizeCudaParams normalized(const Int8QuantizeCudaParams& in) {
  Int8QuantizeCudaParams p = in;
  p.rotate = int8_rotate_env(p.rotate);
  if (!p.x_row_stride) p.x_row_stride = p.k;
  if (!p.q_row_stride) p.q_row_stride = p.k;
  return p;
}

// The path that runs for p: a forced one (p.path, force_generic) or kAuto when it cannot take p;
// otherwise H3RT_INT8_QUANT's where it can, else the team kernel, the block register kernel or
// the shared-memory one, the first that fits.
Int8QuantizePath resolve(const Int8QuantizeCudaParams& p) {
  const Int8QuantizePath forced = p.force_generic ? Int8QuantizePath::kGeneric : p.path;
  const Int8QuantizePath want = forced != Int8QuantizePath::kAuto ? forced : env_path();
  const bool reg = register_kernel_fits(p);
  auto fits = [&](Int8QuantizePath path) {
    switch (path) {
      case Int8QuantizePath::kGeneric:
        return true;
      case Int8QuantizePath::kBlock:
        return reg;
      case Int8QuantizePath::kTeam:
        return reg && team_plan(p.group, p.k).ok;
      default:
        return false;
    }
  };
  if (want != Int8QuantizePath::kAuto && fits(want)) return want;
  if (forced != Int8QuantizePath::kAuto) return Int8QuantizePath::kAuto;
  for (Int8QuantizePath path : {Int8QuantizePath::kTeam, Int8QuantizePath::kBlock})
    if (fits(path)) return path;
  return Int8QuantizePath::kGeneric;
}

}  // namespace

const char* int8_quantize_path_name(Int8QuantizePath path) {
  switch (path) {
    case Int8QuantizePath::kTeam:
      return "team";
    case Int8QuantizePath::kBlock:
      return "block";
    case Int8QuantizePath::kGeneric:
      return "generic";
    default:
      return "auto";
  }
}

namespace {
int team_kernel_arch() {
  cudaFuncAttributes attr{};  // binaryVersion: the arch of the code the device runs, x 10
  H3RT_CUDA_CHECK(cudaFuncGetAttributes(&attr, team_kernel(256)));
  return attr.binaryVersion * 10;
}
}  // namespace

Int8RotateMath int8_rotate_auto_math() {
  return integer_rotation_default(team_kernel_arch()) ? Int8RotateMath::kInteger
                                                      : Int8RotateMath::kDouble;
}

bool int8_rotate_int64_tier() {
  return slow_fp64_arch(team_kernel_arch());
}

Int8QuantizePath int8_quantize_resolve_path(const Int8QuantizeCudaParams& p) {
  return resolve(normalized(p));
}

cudaError_t int8_quantize_rows_cuda(const Int8QuantizeCudaParams& in, cudaStream_t stream) {
  const Int8QuantizeCudaParams p = normalized(in);
  H3RT_CHECK(p.rows >= 0 && p.k > 0 && p.x_row_stride >= p.k && p.q_row_stride >= p.k,
             "int8_quantize_rows_cuda: bad shape rows ", p.rows, ", k ", p.k, ", row strides ",
             p.x_row_stride, " / ", p.q_row_stride);
  H3RT_CHECK(p.group == 0 || (valid_group(p.group) && p.k % p.group == 0),
             "int8_quantize_rows_cuda: group ", p.group, " is not a power of 4 dividing k ", p.k);
  H3RT_CHECK(p.x && p.q && p.scale, "int8_quantize_rows_cuda: null pointer");
  const Int8QuantizePath path = resolve(p);
  if (path == Int8QuantizePath::kAuto) return cudaErrorNotSupported;  // forced path can't
  if (p.rows == 0) return cudaSuccess;
  if (path == Int8QuantizePath::kTeam) {
    const TeamPlan plan = team_plan(p.group, p.k);
    switch (p.group) {
      case 0:
        return launch_team<0>(p, plan, stream);
      case 4:
        return launch_team<4>(p, plan, stream);
      case 16:
        return launch_team<16>(p, plan, stream);
      case 64:
        return launch_team<64>(p, plan, stream);
      default:
        return launch_team<256>(p, plan, stream);
    }
  }
  if (path == Int8QuantizePath::kBlock) {
    switch (p.group) {
      case 0:
        return launch_fast<0>(p, stream);
      case 4:
        return launch_fast<4>(p, stream);
      case 16:
        return launch_fast<16>(p, stream);
      case 64:
        return launch_fast<64>(p, stream);
      default:
        return launch_fast<256>(p, stream);
    }
  }
  const size_t smem = size_t(p.k) * sizeof(double);
  int dev = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  const int optin = cuda::smem_optin(dev);
  H3RT_CHECK(smem + 1024 <= size_t(optin), "int8_quantize_rows_cuda: a row of ", p.k,
             " columns does not fit the shared-memory kernel (", optin, " bytes)");
  H3RT_CUDA_CHECK(cudaFuncSetAttribute(quantize_generic_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  H3RT_CHECK(p.rows < (int64_t(1) << 31), "int8_quantize_rows_cuda: too many rows");
  quantize_generic_kernel<<<static_cast<unsigned>(p.rows), kGenericThreads, smem, stream>>>(p);
  return H3RT_LAUNCH_CHECK("int8 quantize (shared-memory kernel)");
}

}  // namespace h3rt::ops
