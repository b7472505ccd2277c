// Device helpers shared by the Sage attention kernels (mma.sync and wgmma): the base-2
// exponential of the softmax, the packing of P into e4m3 bytes and the output epilogue.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "formats/nvfp4_quantize_fused.cuh"

namespace h3rt::attention_sage::device {

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// Four floats -> four e4m3 bytes (first in the low byte), satfinite RNE.
__device__ __forceinline__ uint32_t pack_e4m3(float a, float b, float c, float d) {
  uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

// The epilogue of both kernels: head h's output rows row0 and row0 + 8 (those < seq) in the
// accumulator quad layout, where word(j, r) is the bf16 pair of row row0 + 8 r at head columns
// 8j + 2q, +1 (q = lane % 4). Written as bf16 if out is set and, with kNvfp4, encoded to NVFP4
// from the same words (nvfp4_detail::encode_head_quads, given g), so both carry the same roundings.
template <bool kNvfp4, typename Word>
__device__ __forceinline__ void write_head_output(__nv_bfloat16* out, int64_t stride,
                                                  const Nvfp4Out& nvfp4, int seq, int heads, int h,
                                                  int row0, int lane, Word&& word) {
  if (out) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      if (row >= seq) continue;
      __nv_bfloat16* dst = out + static_cast<int64_t>(row) * stride + h * 128 + (lane % 4) * 2;
#pragma unroll
      for (int j = 0; j < 16; ++j) *reinterpret_cast<uint32_t*>(dst + j * 8) = word(j, r);
    }
  }
  if constexpr (kNvfp4) {
    const int64_t cols = int64_t(heads) * 128;
    nvfp4_detail::encode_head_quads(nvfp4, *nvfp4.global_scale, seq, cols, h, row0, word);
    nvfp4_detail::fused_scale_padding(nvfp4, seq, cols);
  }
}

}  // namespace h3rt::attention_sage::device
