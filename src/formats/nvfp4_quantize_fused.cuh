// Device side of the fused NVFP4 producers (src/formats/nvfp4_quantize_fused.h): the pieces a
// producer kernel calls once its bf16 outputs are in registers. Everything that decides a bit
// of the result (block amax over bf16 values, the encoders -- the division-free exact encoder of
// nvfp4_exact_encode.h on software-e2m1 targets, BlockEncoder elsewhere --, e2m1 packing, scale
// layout, padding, the amax reduction and g) is the quantizer's own code from
// nvfp4_quantize_kernels.cuh.
#pragma once

#include "formats/nvfp4_quantize_fused.h"
#include "formats/nvfp4_quantize_kernels.cuh"

namespace h3rt::nvfp4_detail {

// What a producer kernel does with its bf16 output (a template parameter of the kernels).
enum FusedMode : int {
  kFuseNone = 0,    // write bf16 only (the plain producer)
  kFuseEncode = 1,  // encode to NVFP4 with g = *global_scale (given, or pass 2)
  kFuseAmax = 2,    // pass 1 of a computed g: reduce amax|y| only, store nothing of y
};

// Lane-pair layout (rmsnorm_modulate, swiglu): lanes 2i and 2i+1 of a warp hold 8 consecutive
// bf16 outputs each (packed in a uint4), chunks 2k and 2k+1 of row `row`, i.e. elements [0, 8)
// and [8, 16) of block k. Every lane of the warp must call (one shuffle); `active` is the same
// for both lanes of a pair. Writes 4 qdata bytes per lane and the scale byte from the even lane.
// `byte_order` (a __byte_perm selector) reorders the 4 code bytes before the store, for callers
// whose uint4 holds the chunk's element pairs out of order (the quad layout below).
__device__ __forceinline__ void encode_pair_chunk(const uint4& y, bool active, float g,
                                                  const Nvfp4Out& o, int64_t row, int64_t chunk,
                                                  int64_t cols, uint32_t byte_order = 0x3210u) {
  const auto store = [&](uint32_t w, uint8_t s) {
    if (byte_order != 0x3210u) w = __byte_perm(w, 0, byte_order);
    *reinterpret_cast<uint32_t*>(o.qdata + row * (cols / 2) + chunk * 4) = w;
    if ((chunk & 1) == 0) o.scales[nvfp4::scale_offset(row, chunk / 2, cols / nvfp4::kBlock)] = s;
  };
#if !H3RT_HAS_E2M1_CVT
  // Software e2m1 targets: the division-free exact encoder (src/formats/nvfp4_exact_encode.h)
  // where g is in its range (g is uniform, so both lanes of a pair take the same branch).
  const nvfp4::ScaleDivider sd(g);
  if (sd.exact) {
    const nvfp4::Pairs8 pw = nvfp4::pairs8(y.x, y.y, y.z, y.w);
    constexpr uint32_t kM = 0x80008000u;  // the (x | 0x8000) words of the encoder
    const uint32_t m =
        __vmaxu2(__vmaxu2(pw.ev0 | kM, pw.ev1 | kM), __vmaxu2(pw.od0 | kM, pw.od1 | kM));
    uint32_t a16 = max(m >> 16, m & 0xffffu) & 0x7fffu;
    a16 = max(a16, __shfl_xor_sync(0xffffffffu, a16, 1));
    if (!active) return;
    const nvfp4::ExactBlockEncoder e(a16, sd);
    store(e.encode(pw), e.s);
    return;
  }
#endif
  uint32_t a16 = absmax_bits16(y);
  a16 = max(a16, __shfl_xor_sync(0xffffffffu, a16, 1));
  if (!active) return;
  float f[8];
  unpack8(y, f);
  const BlockEncoder<false> e(__uint_as_float(a16 << 16), g);
  store(e.pack8<HardwareCvt>(f), static_cast<uint8_t>(e.s));
}

// Quad layout (the accumulator fragments of mma.sync m16n8 and wgmma m64nN: the attention
// epilogues): a 16-column block of rows r0 and r0 + 8 lies in the 4 lanes of a quad. Lane q holds
// the bf16 pairs w[i][0] (block columns 2q, 2q+1) and w[i][1] (8+2q, 9+2q) of row r0 + 8i.
// Three xor-shuffles transpose the quad into the lane-pair layout: lane L = 2i + h takes word
// w[i][h] of every lane, which is chunk h of row r0 + 8i (element pairs from lanes L, L^1, L^2,
// L^3 in that order, undone by a byte permute at the store), and encode_pair_chunk encodes it.
// Every lane of the warp must call; rows >= `rows` are encoded but not stored.
__device__ __forceinline__ void encode_quad_block(const Nvfp4Out& o, float g,
                                                  const uint32_t (&w)[2][2], int64_t rows,
                                                  int64_t cols, int64_t block, int64_t r0) {
  const uint32_t L = threadIdx.x & 3;
  const auto pick = [&](uint32_t k) {  // w[k >> 1][k & 1] without local-memory indexing
    const uint32_t a = (k & 1) ? w[0][1] : w[0][0], b = (k & 1) ? w[1][1] : w[1][0];
    return (k & 2) ? b : a;
  };
  uint4 y;  // y.k: the pair of lane L ^ k
  y.x = pick(L);
  y.y = __shfl_xor_sync(0xffffffffu, pick(L ^ 1), 1);
  y.z = __shfl_xor_sync(0xffffffffu, pick(L ^ 2), 2);
  y.w = __shfl_xor_sync(0xffffffffu, pick(L ^ 3), 3);
  const int64_t row = r0 + 8 * (L >> 1);
  // Code byte k belongs to lane L ^ k's pair: output byte q takes byte q ^ L.
  encode_pair_chunk(y, row < rows, g, o, row, 2 * block + (L & 1), cols, 0x3210u ^ (L * 0x1111u));
}

// A whole 128-column head in the quad layout: word(j, i) is lane q's bf16 pair of row r0 + 8 i
// at head columns 8j + 2q, 8j + 2q + 1 (j = 0..15), rounded exactly as the kernel's bf16 store.
template <typename Word>
__device__ __forceinline__ void encode_head_quads(const Nvfp4Out& o, float g, int64_t rows,
                                                  int64_t cols, int64_t head, int64_t r0,
                                                  Word&& word) {
#pragma unroll
  for (int b = 0; b < 8; ++b) {
    const uint32_t w[2][2] = {{word(2 * b, 0), word(2 * b + 1, 0)},
                              {word(2 * b, 1), word(2 * b + 1, 1)}};
    encode_quad_block(o, g, w, rows, cols, head * 8 + b, r0);
  }
}

// Pass 1 epilogue: the CTA's amax (bf16 bits of |y|, per thread) is reduced and added to the
// workspace; the last CTA of the grid stores g. Every thread of the CTA must call.
__device__ __forceinline__ void finish_amax_pass(uint32_t amax16, const Nvfp4Out& o) {
  amax16 = block_max(amax16);
  if (threadIdx.x == 0) {
    float g;
    if (arrive_amax(static_cast<Workspace*>(o.workspace), amax16, gridDim.x * gridDim.y,
                    o.rule == Nvfp4ScaleRule::kBf16Activation ? 1 : 0, &g))
      *o.global_scale = g;
  }
}

// Encode pass: zero the scale padding, spread over every thread of the grid.
__device__ __forceinline__ void fused_scale_padding(const Nvfp4Out& o, int64_t rows, int64_t cols) {
  const int64_t cta = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
  write_scale_padding(o.scales, rows, cols / nvfp4::kBlock, cta * blockDim.x + threadIdx.x,
                      static_cast<int64_t>(gridDim.x) * gridDim.y * blockDim.x);
}

}  // namespace h3rt::nvfp4_detail
