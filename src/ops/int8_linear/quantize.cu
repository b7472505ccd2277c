// Rotate + quantize int8 rows on the GPU (see int8_linear.h for the rule and the exactness
// argument): a register kernel for the aligned shapes and a literal shared-memory one otherwise.
#include <algorithm>

#include "cuda/runtime.h"
#include "ops/int8_linear/int8_linear.h"
#include "ops/int8_linear/int8_math.cuh"

namespace h3rt::ops {
namespace {

using int8_detail::bf16_bits;
using int8_detail::bf16_value;

constexpr int kMaxFastK = 16384;     // 1024 threads x 16 columns
constexpr int kTileWords = 32 * 17;  // per-warp transpose tile: 32 lanes x 16 words, pitch 17
constexpr int kGenericThreads = 256;

// ---- exact scalar steps shared by both kernels --------------------------------------------

// s = max(amax / 127, 1e-30) as std::max writes it (a < b ? b : a).
__device__ __forceinline__ float row_scale(float amax) {
  const float a = __fdiv_rn(amax, 127.0f);
  return a < 1e-30f ? 1e-30f : a;
}

// to_int8(bf16(v / sb)) with the quotient as v * rcp (see the header for why the bits agree).
__device__ __forceinline__ int quantize1(float v, float rcp) {
  const float r = rintf(bf16_value(bf16_bits(__fmul_rn(v, rcp))));
  return static_cast<int>(fminf(fmaxf(r, -128.0f), 127.0f));
}

// The host's radix-4 butterfly, operation for operation (see the header on a1 - a0).
__device__ __forceinline__ void butterfly(double& a0, double& a1, double& a2, double& a3) {
  const double p = __dadd_rn(a0, a1), d = __dsub_rn(a0, a1);
  const double o0 = __dsub_rn(__dadd_rn(p, a2), a3);
  const double o1 = __dadd_rn(__dsub_rn(p, a2), a3);
  const double o2 = __dadd_rn(__dadd_rn(d, a2), a3);
  const double o3 = __dadd_rn(__dsub_rn(a2, d), a3);
  a0 = o0;
  a1 = o1;
  a2 = o2;
  a3 = o3;
}

// One stage of stride s (1 or 4) over 16 values held in registers.
template <int S>
__device__ __forceinline__ void stage16(double (&a)[16]) {
#pragma unroll
  for (int blk = 0; blk < 16; blk += 4 * S)
#pragma unroll
    for (int t = blk; t < blk + S; ++t) butterfly(a[t], a[t + S], a[t + 2 * S], a[t + 3 * S]);
}

__host__ __device__ constexpr int half_log2(int g) {
  int m = 0;
  while ((1 << (2 * m)) < g) ++m;
  return m;
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

}  // namespace

cudaError_t int8_quantize_rows_cuda(const Int8QuantizeCudaParams& in, cudaStream_t stream) {
  Int8QuantizeCudaParams p = in;
  if (!p.x_row_stride) p.x_row_stride = p.k;
  if (!p.q_row_stride) p.q_row_stride = p.k;
  H3RT_CHECK(p.rows >= 0 && p.k > 0 && p.x_row_stride >= p.k && p.q_row_stride >= p.k,
             "int8_quantize_rows_cuda: bad shape rows ", p.rows, ", k ", p.k, ", row strides ",
             p.x_row_stride, " / ", p.q_row_stride);
  H3RT_CHECK(p.group == 0 || (valid_group(p.group) && p.k % p.group == 0),
             "int8_quantize_rows_cuda: group ", p.group, " is not a power of 4 dividing k ", p.k);
  H3RT_CHECK(p.x && p.q && p.scale, "int8_quantize_rows_cuda: null pointer");
  if (p.rows == 0) return cudaSuccess;
  const bool fast =
      !p.force_generic && p.k % 16 == 0 && p.k <= kMaxFastK && p.x_row_stride % 8 == 0 &&
      p.q_row_stride % 16 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(p.q) % 16 == 0 &&
      (p.group == 0 || p.group == 4 || p.group == 16 || p.group == 64 || p.group == 256);
  if (fast) {
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
  int dev = 0, optin = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  H3RT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
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
