// NVFP4 quantize kernels (see src/formats/nvfp4_quantize.h for the algorithm and contract).
// Templated on the e2m1 converter so that nvfp4_quantize.cu (software conversion) and
// nvfp4_quantize_sm100.cu (hardware cvt where the target has it) instantiate the same code.
//
// Work decomposition: the bf16 input is viewed as rows * cols / 16 blocks of 16 elements (two
// 16-byte loads); a tile is kThreads * kBlocksPerThread blocks (= kTileChunks chunks of 8);
// thread t of a tile handles blocks base + j * kThreads + t (j < kBlocksPerThread), issuing all
// its loads before any arithmetic, and writes the block's 8 qdata bytes and its scale byte.
// Encoders: IEEE mode with the software e2m1 conversion uses the division-free exact encoder
// (src/formats/nvfp4_exact_encode.h) whenever g is in its range; the hardware-cvt targets, the
// fast-math mode and other g use BlockEncoder (reciprocal + correction per element).
// The previous kernel (lane pairs per block, BlockEncoder for every element) is kept as the
// `legacy` path for A/B measurements (quantize_with_encoder).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "formats/nvfp4_exact_encode.h"
#include "formats/nvfp4_layout.h"
#include "formats/nvfp4_quantize.h"

#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL) || \
    defined(__CUDA_ARCH_FEAT_SM110_ALL) || defined(__CUDA_ARCH_FEAT_SM120_ALL) || \
    defined(__CUDA_ARCH_FEAT_SM121_ALL) ||                                        \
    (defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000)
#define H3RT_HAS_E2M1_CVT 1
#else
#define H3RT_HAS_E2M1_CVT 0
#endif

namespace h3rt::nvfp4_detail {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr uint32_t kTileChunks = kThreads * kUnroll;
constexpr int kBlocksPerThread = kUnroll / 2;  // a tile covers the same elements either way
constexpr uint32_t kTileBlocks = kThreads * kBlocksPerThread;

struct Workspace {
  unsigned amax_bits;   // fp32 bits of the running amax (0 between launches)
  unsigned count;       // CTAs arrived (0 between launches)
  unsigned generation;  // bumped once per single-launch barrier
  float g;              // published global scale
};

struct Geometry {
  const __nv_bfloat16* x;
  int64_t ld;
  uint32_t cpr;      // chunks per row (cols / 8)
  uint32_t nchunks;  // rows * cpr
  uint32_t ntiles;
  int64_t rows, kb, kbp;  // block-scale columns: cols / 16 and roundup(kb, 4)
  uint8_t* qdata;
  uint8_t* scales;
  int bf16_rule;
  uint32_t nblocks;      // rows * kb
  nvfp4::DivU31 kb_div;  // block index -> row
  uint32_t scale_tiles;  // 128x4 scale tiles per tile row: kbp / 4
  bool qdata8;           // qdata 8-byte aligned (one 8-byte store per block)
};

// ---- e2m1 converters: 8 signed values -> 4 bytes, element 2j in the high nibble of byte j ----

struct SoftwareCvt {
  static constexpr bool kNative = false;
  // One byte: a in the high nibble, b in the low nibble.
  __device__ __forceinline__ static uint32_t pack2(float a, float b) {
    const uint32_t ca = nvfp4::e2m1_magnitude(fabsf(a)) | ((__float_as_uint(a) >> 28) & 8u);
    const uint32_t cb = nvfp4::e2m1_magnitude(fabsf(b)) | ((__float_as_uint(b) >> 28) & 8u);
    return (ca << 4) | cb;
  }
  __device__ __forceinline__ static uint32_t pack8(const float (&v)[8]) {
    uint32_t w = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t code =
          nvfp4::e2m1_magnitude(fabsf(v[i])) | ((__float_as_uint(v[i]) >> 28) & 8u);
      w |= code << (8 * (i / 2) + ((i & 1) ? 0 : 4));
    }
    return w;
  }
};

struct HardwareCvt {
  static constexpr bool kNative = H3RT_HAS_E2M1_CVT;  // per device compilation pass
  __device__ __forceinline__ static uint32_t pack2(float a, float b) {
#if H3RT_HAS_E2M1_CVT
    unsigned short r;
    asm("{\n .reg .b8 t;\n cvt.rn.satfinite.e2m1x2.f32 t, %1, %2;\n mov.b16 %0, {t, 0};\n}"
        : "=h"(r)
        : "f"(a), "f"(b));
    return r & 0xffu;
#else
    return SoftwareCvt::pack2(a, b);
#endif
  }
  __device__ __forceinline__ static uint32_t pack8(const float (&v)[8]) {
#if H3RT_HAS_E2M1_CVT
    uint32_t w = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      unsigned short b;
      // a (upper nibble) = element 2j, b (lower nibble) = element 2j+1
      asm("{\n .reg .b8 t;\n cvt.rn.satfinite.e2m1x2.f32 t, %1, %2;\n mov.b16 %0, {t, 0};\n}"
          : "=h"(b)
          : "f"(v[2 * j]), "f"(v[2 * j + 1]));
      w |= static_cast<uint32_t>(b & 0xffu) << (8 * j);
    }
    return w;
#else
    return SoftwareCvt::pack8(v);
#endif
  }
};

// ---- fast-math primitives (what nvcc --use_fast_math emits for / and 1/x) ----

__device__ __forceinline__ float div_approx_ftz(float a, float b) {
  float d;
  asm("div.approx.ftz.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
__device__ __forceinline__ float rcp_approx_ftz(float a) {
  float d;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(d) : "f"(a));
  return d;
}
__device__ __forceinline__ float mul_ftz(float a, float b) {
  float d;
  asm("mul.ftz.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

__device__ __forceinline__ float e4m3_value(__nv_fp8_storage_t s) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(s, __NV_E4M3)));  // exact: e4m3 in f16
}

// ---- per-chunk pieces ----

__device__ __forceinline__ uint32_t absmax_bits16(const uint4& v) {
  // |bf16| orders like its bits with the sign cleared (NaN above Inf, so NaN propagates)
  const uint32_t m = __vmaxu2(__vmaxu2(v.x & 0x7fff7fffu, v.y & 0x7fff7fffu),
                              __vmaxu2(v.z & 0x7fff7fffu, v.w & 0x7fff7fffu));
  return max(m >> 16, m & 0xffffu);
}

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ const uint4* chunk_ptr(const Geometry& geo, uint32_t chunk,
                                                  uint32_t& row, uint32_t& cc) {
  row = chunk / geo.cpr;
  cc = chunk - row * geo.cpr;
  return reinterpret_cast<const uint4*>(geo.x + static_cast<int64_t>(row) * geo.ld + cc * 8u);
}

// ---- the per-block encoder, shared by the quantize kernels and the fused producers ----
//
// BlockEncoder<kFast>(amax, g) derives a block's e4m3 scale code `s` from the block amax and g;
// pack8 / pack2 then encode elements of that block: x / (g * s) as the quantizer computes it,
// converted by Cvt. IEEE mode (kFast false): s = e4m3_satfinite(min(amax/6/g, 448)) with IEEE
// divisions, d = g * s rounded to fp32, correctly rounded x / d (reciprocal + Markstein correction
// where d is in range, IEEE division otherwise), and d == 0 gives +0 for every element. Fast mode:
// comfy-kitchen's fast-math formula (approximate divisions and reciprocal, ftz). A caller that
// holds a 16-element block (possibly spread over lanes) computes the amax over the bf16 values,
// builds one encoder and feeds every element through pack8 / pack2: the result is bit-identical to
// nvfp4_quantize on the same bf16 tensor.
template <bool kFast>
struct BlockEncoder {
  __nv_fp8_storage_t s;
  float d;   // IEEE: g * float(s); fast: the encode factor min(rcp(s * g), FLT_MAX)
  float r;   // IEEE: RN(1 / d) when d is in the reciprocal's range
  int mode;  // IEEE: 0 d == 0 (+0 codes), 1 reciprocal + correction, 2 IEEE division

  __device__ __forceinline__ BlockEncoder(float amax, float g) {
    if constexpr (kFast) {
      float q = div_approx_ftz(div_approx_ftz(amax, nvfp4::kE2m1Max), g);
      q = fminf(q, nvfp4::kE4m3Max);
      s = __nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3);
      d = fminf(rcp_approx_ftz(mul_ftz(e4m3_value(s), g)), FLT_MAX);
      r = 0.0f;
      mode = 1;
    } else {
      s = __nv_cvt_float_to_fp8(nvfp4::scale_quotient(amax, g), __NV_SATFINITE, __NV_E4M3);
      d = __fmul_rn(g, e4m3_value(s));
      r = 0.0f;
      mode = 2;
      if (d == 0.0f) {
        mode = 0;
      } else if (d >= nvfp4::kRecipMinDivisor && d <= nvfp4::kRecipMaxDivisor) {
        r = __frcp_rn(d);
        mode = 1;
      }
    }
  }

  // x / (g * s) for N elements; the IEEE mode branches once per call, not per element.
  template <int N>
  __device__ __forceinline__ void scale_all(const float* f, float* v) const {
    if constexpr (kFast) {
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = mul_ftz(f[i], d);
    } else if (mode == 1) {
#pragma unroll
      for (int i = 0; i < N; ++i)
        v[i] = copysignf(nvfp4::div_by_reciprocal(fabsf(f[i]), d, r), f[i]);
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = copysignf(__fdiv_rn(fabsf(f[i]), d), f[i]);
    }
  }

  // 8 consecutive elements of the block -> 4 bytes (element 2j in the high nibble of byte j).
  template <class Cvt>
  __device__ __forceinline__ uint32_t pack8(const float (&f)[8]) const {
    if (!kFast && mode == 0) return 0u;
    float v[8];
    scale_all<8>(f, v);
    return Cvt::pack8(v);
  }
  // Elements (a, b) = (2j, 2j+1) of the block -> byte j.
  template <class Cvt>
  __device__ __forceinline__ uint32_t pack2(float a, float b) const {
    if (!kFast && mode == 0) return 0u;
    const float f[2] = {a, b};
    float v[2];
    scale_all<2>(f, v);
    return Cvt::pack2(v[0], v[1]);
  }
};

// IEEE mode: reference semantics exactly.
template <class Cvt>
__device__ __forceinline__ uint32_t encode_ieee(const float (&f)[8], float amax, float g,
                                                __nv_fp8_storage_t& s) {
  const BlockEncoder<false> e(amax, g);
  s = e.s;
  return e.template pack8<Cvt>(f);
}

// Fast-math mode: comfy-kitchen's kernel formula with approximate division and ftz.
template <class Cvt>
__device__ __forceinline__ uint32_t encode_fast(const float (&f)[8], float amax, float g,
                                                __nv_fp8_storage_t& s) {
  const BlockEncoder<true> e(amax, g);
  s = e.s;
  return e.template pack8<Cvt>(f);
}

// The previous decomposition (legacy, for A/B): lanes 2i and 2i+1 hold the two halves of one
// block, one shuffle gives the block amax, every element goes through BlockEncoder.
template <class Cvt, bool kFast>
__device__ __forceinline__ void quantize_tile_pairs(const Geometry& geo, uint32_t tile, float g) {
  uint4 v[kUnroll];
  uint32_t row[kUnroll], cc[kUnroll];
  const uint32_t base = tile * kTileChunks + threadIdx.x;
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    const uint32_t chunk = base + j * kThreads;
    v[j] = chunk < geo.nchunks ? *chunk_ptr(geo, chunk, row[j], cc[j]) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    uint32_t a16 = absmax_bits16(v[j]);
    a16 = max(a16, __shfl_xor_sync(0xffffffffu, a16, 1));
    if (base + j * kThreads >= geo.nchunks) continue;  // pairs are active together
    float f[8];
    unpack8(v[j], f);
    const float amax = __uint_as_float(a16 << 16);
    __nv_fp8_storage_t s;
    const uint32_t w = kFast ? encode_fast<Cvt>(f, amax, g, s) : encode_ieee<Cvt>(f, amax, g, s);
    *reinterpret_cast<uint32_t*>(geo.qdata + static_cast<int64_t>(row[j]) * (geo.cpr * 4u) +
                                 cc[j] * 4u) = w;
    if ((threadIdx.x & 1u) == 0)
      geo.scales[nvfp4::scale_offset(row[j], cc[j] / 2, geo.kb)] = static_cast<uint8_t>(s);
  }
}

// ---- one thread per 16-element block ----

// bf16 bits of max|x| over 16 elements given as (x | 0x8000) per half (NaN above Inf).
__device__ __forceinline__ uint32_t absmax16_of(const uint32_t (&p)[8]) {
  const uint32_t m = __vmaxu2(__vmaxu2(__vmaxu2(p[0], p[1]), __vmaxu2(p[2], p[3])),
                              __vmaxu2(__vmaxu2(p[4], p[5]), __vmaxu2(p[6], p[7])));
  return max(m >> 16, m & 0xffffu) & 0x7fffu;
}

// A 16-element block (two uint4 of bf16) -> 8 qdata bytes (lo: elements 0..7) and its scale.
template <class Cvt, bool kFast>
__device__ __forceinline__ void encode_block(const uint4 (&v)[2], const nvfp4::ScaleDivider& sd,
                                             uint32_t& lo, uint32_t& hi, uint8_t& s) {
  if constexpr (!kFast && !Cvt::kNative) {
    if (sd.exact) {
      const nvfp4::Pairs8 a = nvfp4::pairs8(v[0].x, v[0].y, v[0].z, v[0].w);
      const nvfp4::Pairs8 b = nvfp4::pairs8(v[1].x, v[1].y, v[1].z, v[1].w);
      constexpr uint32_t kM = 0x80008000u;  // the same (x | 0x8000) words as code_planes
      const uint32_t p[8] = {a.ev0 | kM, a.ev1 | kM, a.od0 | kM, a.od1 | kM,
                             b.ev0 | kM, b.ev1 | kM, b.od0 | kM, b.od1 | kM};
      const nvfp4::ExactBlockEncoder e(absmax16_of(p), sd);
      lo = e.encode(a);
      hi = e.encode(b);
      s = e.s;
      return;
    }
  }
  const uint32_t a16 = max(absmax_bits16(v[0]), absmax_bits16(v[1]));
  const BlockEncoder<kFast> e(__uint_as_float(a16 << 16), sd.g);
  float f[8];
  unpack8(v[0], f);
  lo = e.template pack8<Cvt>(f);
  unpack8(v[1], f);
  hi = e.template pack8<Cvt>(f);
  s = static_cast<uint8_t>(e.s);
}

// Byte offset of scale (r, c) in the 128x4 tiled layout (nvfp4::scale_offset).
__device__ __forceinline__ uint64_t scale_offset_fast(const Geometry& geo, uint32_t r, uint32_t c) {
  const uint32_t tile = (r >> 7) * geo.scale_tiles + (c >> 2);
  return static_cast<uint64_t>(tile) * 512u + ((r & 31u) * 16u + ((r >> 5) & 3u) * 4u + (c & 3u));
}

template <class Cvt, bool kFast>
__device__ __forceinline__ void quantize_tile(const Geometry& geo, uint32_t tile,
                                              const nvfp4::ScaleDivider& sd) {
  uint4 v[kBlocksPerThread][2];
  uint32_t row[kBlocksPerThread], cb[kBlocksPerThread];
  const uint32_t base = tile * kTileBlocks + threadIdx.x;
#pragma unroll
  for (int j = 0; j < kBlocksPerThread; ++j) {
    const uint32_t b = base + j * kThreads;
    row[j] = geo.kb_div.div(b);
    cb[j] = b - row[j] * static_cast<uint32_t>(geo.kb);
    if (b < geo.nblocks) {
      const uint4* p = reinterpret_cast<const uint4*>(
          geo.x + static_cast<int64_t>(row[j]) * geo.ld + cb[j] * 16u);
      v[j][0] = p[0];
      v[j][1] = p[1];
    }
  }
#pragma unroll
  for (int j = 0; j < kBlocksPerThread; ++j) {
    const uint32_t b = base + j * kThreads;
    if (b >= geo.nblocks) continue;
    uint32_t lo, hi;
    uint8_t s;
    encode_block<Cvt, kFast>(v[j], sd, lo, hi, s);
    uint8_t* q = geo.qdata + static_cast<uint64_t>(b) * 8u;
    if (geo.qdata8) {
      *reinterpret_cast<uint2*>(q) = make_uint2(lo, hi);
    } else {
      reinterpret_cast<uint32_t*>(q)[0] = lo;
      reinterpret_cast<uint32_t*>(q)[1] = hi;
    }
    geo.scales[scale_offset_fast(geo, row[j], cb[j])] = s;
  }
}

__device__ __forceinline__ uint32_t tile_absmax(const Geometry& geo, uint32_t tile) {
  uint4 v[kUnroll];
  uint32_t row, cc;
  const uint32_t base = tile * kTileChunks + threadIdx.x;
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    const uint32_t chunk = base + j * kThreads;
    v[j] = chunk < geo.nchunks ? *chunk_ptr(geo, chunk, row, cc) : make_uint4(0, 0, 0, 0);
  }
  uint32_t m = 0;
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) m = max(m, absmax_bits16(v[j]));
  return m;
}

// Max over the CTA (any blockDim.x that is a multiple of 32, up to 1024); valid in thread 0.
__device__ __forceinline__ uint32_t block_max(uint32_t v) {
  __shared__ uint32_t part[32];
  v = __reduce_max_sync(0xffffffffu, v);
  if ((threadIdx.x & 31u) == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0u;
    v = __reduce_max_sync(0xffffffffu, v);
  }
  return v;
}

// Zero the scale entries outside the real [rows, kb] block grid of a scale matrix with
// kbp = roundup(kb, 4) columns and roundup(rows, 128) rows; thread `tid` of `nthreads` (all
// threads of the grid together write every padding entry once).
__device__ __forceinline__ void write_scale_padding(uint8_t* scales, int64_t rows, int64_t kb,
                                                    int64_t tid, int64_t nthreads) {
  const int64_t kbp = nvfp4::round_up(kb, 4);
  const int64_t pad_right = rows * (kbp - kb);
  const int64_t pad_total = nvfp4::scale_rows(rows) * kbp - rows * kb;
  for (int64_t i = tid; i < pad_total; i += nthreads) {
    int64_t r, c;
    if (i < pad_right) {
      const int64_t w = kbp - kb;
      r = i / w;
      c = kb + i % w;
    } else {
      const int64_t j = i - pad_right;
      r = rows + j / kbp;
      c = j % kbp;
    }
    scales[nvfp4::scale_offset(r, c, kb)] = 0;
  }
}

__device__ __forceinline__ void write_padding(const Geometry& geo) {
  write_scale_padding(geo.scales, geo.rows, geo.kb,
                      static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                      static_cast<int64_t>(gridDim.x) * blockDim.x);
}

// Thread 0: add this CTA's amax (bf16 bits of |x|) and arrive; the last of the grid's `ctas`
// CTAs computes g by the rule (bf16_rule: kBf16Activation), resets the counters and returns
// true (g in *g_out).
__device__ __forceinline__ bool arrive_amax(Workspace* ws, uint32_t amax16, unsigned ctas,
                                            int bf16_rule, float* g_out) {
  atomicMax(&ws->amax_bits, amax16 << 16);
  __threadfence();
  if (atomicAdd(&ws->count, 1u) != ctas - 1) return false;
  __threadfence();
  const unsigned bits = atomicExch(&ws->amax_bits, 0u);
  atomicExch(&ws->count, 0u);
  *g_out = nvfp4::global_scale_from_amax(__uint_as_float(bits), bf16_rule);
  return true;
}

__device__ __forceinline__ bool arrive_amax(const Geometry& geo, Workspace* ws, uint32_t amax16,
                                            float* g_out) {
  return arrive_amax(ws, amax16, gridDim.x, geo.bf16_rule, g_out);
}

// ---- kernels ----

template <class Cvt, bool kFast, bool kLegacy>
__global__ void __launch_bounds__(kThreads) quantize_kernel(Geometry geo, const float* g_in) {
  const float g = *g_in;
  if constexpr (kLegacy)
    quantize_tile_pairs<Cvt, kFast>(geo, geo.ntiles - 1 - blockIdx.x, g);
  else
    quantize_tile<Cvt, kFast>(geo, geo.ntiles - 1 - blockIdx.x, nvfp4::ScaleDivider(g));
  write_padding(geo);
}

template <class Cvt, bool kFast>
__global__ void __launch_bounds__(kThreads)
    fused_kernel(Geometry geo, Workspace* ws, float* g_out) {
  __shared__ float g_shared;
  uint32_t m = 0;
  for (uint32_t t = blockIdx.x; t < geo.ntiles; t += gridDim.x) m = max(m, tile_absmax(geo, t));
  m = block_max(m);
  if (threadIdx.x == 0) {
    volatile unsigned* gen = &ws->generation;
    const unsigned seen = *gen;  // ordered before the arrival by the fence in arrive_amax
    float g;
    if (arrive_amax(geo, ws, m, &g)) {
      *reinterpret_cast<volatile float*>(&ws->g) = g;
      *g_out = g;
      __threadfence();
      atomicAdd(&ws->generation, 1u);
    } else {
      while (*gen == seen) __nanosleep(100);
      __threadfence();
      g = *reinterpret_cast<volatile float*>(&ws->g);
    }
    g_shared = g;
  }
  __syncthreads();
  const nvfp4::ScaleDivider sd(g_shared);
  for (int64_t t = static_cast<int64_t>(geo.ntiles) - 1 - blockIdx.x; t >= 0; t -= gridDim.x)
    quantize_tile<Cvt, kFast>(geo, static_cast<uint32_t>(t), sd);
  write_padding(geo);
}

// ---- host-side launch helpers, instantiated per converter ----

template <class Cvt>
cudaError_t launch_quantize(const Geometry& geo, const float* g, bool fast, cudaStream_t s,
                            bool legacy = false) {
  void (*k)(Geometry, const float*) =
      legacy ? (fast ? quantize_kernel<Cvt, true, true> : quantize_kernel<Cvt, false, true>)
             : (fast ? quantize_kernel<Cvt, true, false> : quantize_kernel<Cvt, false, false>);
  k<<<geo.ntiles, kThreads, 0, s>>>(geo, g);
  return cudaGetLastError();
}

template <class Cvt>
cudaError_t launch_fused(const Geometry& geo, Workspace* ws, float* g_out, bool fast,
                         cudaStream_t s) {
  void (*k)(Geometry, Workspace*, float*) =
      fast ? fused_kernel<Cvt, true> : fused_kernel<Cvt, false>;
  int dev = 0, sms = 0, per_sm = 0, coop = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, 0);
  if (e != cudaSuccess) return e;
  if (!coop || per_sm < 1) return cudaErrorNotSupported;
  const int64_t resident = static_cast<int64_t>(per_sm) * sms;
  const unsigned grid = static_cast<unsigned>(resident < geo.ntiles ? resident : geo.ntiles);
  Geometry g = geo;
  void* args[] = {&g, &ws, &g_out};
  return cudaLaunchCooperativeKernel(reinterpret_cast<void*>(k), dim3(grid), dim3(kThreads), args,
                                     0, s);
}

// Implemented in nvfp4_quantize_sm100.cu (hardware e2m1 conversion where compiled for it).
cudaError_t launch_quantize_hw(const Geometry& geo, const float* g, bool fast, cudaStream_t s);
cudaError_t launch_fused_hw(const Geometry& geo, Workspace* ws, float* g_out, bool fast,
                            cudaStream_t s);

// nvfp4_quantize with the encoder chosen: `legacy` runs the previous kernel (lane pairs,
// BlockEncoder for every element) for kGiven / kTwoPass with the software e2m1 conversion;
// kSingleLaunch and the hardware-cvt path ignore it. For A/B
// measurements (src/bench/nvfp4_quantize_bench.cu); nvfp4_quantize passes legacy = false.
cudaError_t quantize_with_encoder(const Nvfp4QuantizeParams& p, bool legacy, cudaStream_t s);

}  // namespace h3rt::nvfp4_detail
