// NVFP4 tensors as comfy-kitchen packs them (the format our users' checkpoints use), with a
// plain host reference for quantize and dequantize.
//
// Per tensor: a global scale g (fp32). Per 16 consecutive elements along a row (a "block"):
//   s   = e4m3_satfinite_rne(min(float(amax|block|) / 6 / g, 448))   (IEEE divisions, in order)
//   q_i = e2m1_rne(clamp(x_i / (g * float(s)), -6, 6))               (g * s rounded to fp32 first)
// and a block with g * float(s) == 0 gets +0 codes. Decoding: x_i ~ e2m1(q_i) * float(s) * g.
//
// Storage: qdata u8 [rows, cols/2], element 2j in the HIGH nibble of byte j and 2j+1 in the low
// nibble (comfy-kitchen hi_first); scales e4m3 bytes in the cuBLAS/CUTLASS 128x4 tiled layout,
// [roundup(rows, 128), roundup(cols/16, 4)], padding zero (src/formats/nvfp4_layout.h).
//
// The global scale: g = amax|x| / (6 * 448), evaluated in one of two ways (Nvfp4ScaleRule).
// kF32Divide divides in fp32 (float(amax) / 2688.0f): this is how the golden vectors and packed
// weights were made (their per_tensor_scale values are not bf16 numbers). kBf16Activation is what
// the runtime path computes for bf16 activations: fp32 product amax * float32(1/2688) rounded
// to bf16 (the activation dtype), then widened. A static `input_scale` from a checkpoint
// replaces the computed activation g; packed weights carry theirs as `weight_scale_2`.
#pragma once

#include <cstdint>
#include <string>

#include "h3rt/tensor.h"

namespace h3rt {

enum class Nvfp4ScaleRule : uint8_t { kF32Divide, kBf16Activation };

// g from amax|x| by the given rule (amax >= 0; amax == 0 gives g == 0).
float nvfp4_global_scale_from_amax(float amax, Nvfp4ScaleRule rule);
// max |x| over a 2-D bf16 or f32 host tensor with unit column stride (NaN propagates).
float abs_max(const Tensor& x);
// nvfp4_global_scale_from_amax(abs_max(x), rule).
float nvfp4_global_scale(const Tensor& x, Nvfp4ScaleRule rule);

// Block scale (e4m3 code) of a block with the given amax, and the e2m1 code (low 4 bits) of one
// element of a block whose scale code is `scale`.
uint8_t nvfp4_block_scale(float block_amax, float g);
uint8_t nvfp4_encode(float x, float g, uint8_t scale);

int64_t nvfp4_scales_bytes(int64_t rows, int64_t cols);  // roundup(rows,128) * roundup(cols/16,4)

struct Nvfp4Tensor {
  Tensor qdata;   // u8 [rows, cols/2]
  Tensor scales;  // u8 [roundup(rows, 128), roundup(cols/16, 4)], tiled
  float global_scale = 0.0f;
};

// Host reference quantizer. x: 2-D bf16 or f32 host tensor [rows, cols] with unit column stride
// and any row stride; cols % 16 == 0; g >= 0 and finite. The output buffers receive
// rows * cols / 2 bytes (row-major) and nvfp4_scales_bytes(rows, cols) bytes (padding zeroed).
void nvfp4_quantize_into(const Tensor& x, float g, uint8_t* qdata, uint8_t* scales);
Nvfp4Tensor nvfp4_quantize(const Tensor& x, float g);

// Host dequantize to f32 [rows, cols]: e2m1(q) * float(s) * g per element, in that order.
Tensor nvfp4_dequantize(const Tensor& qdata, const Tensor& scales, float g);

// The `quantize-nvfp4` file transform: reads bf16 `x` [rows, cols] and optional f32
// `per_tensor_scale` [1] (computed from x by `rule` when absent) from `in_path`; writes `qdata`,
// `scales` and `per_tensor_scale` to `out_path`. Errors name the file, tensor and expected shape.
void quantize_nvfp4_file(const std::string& in_path, const std::string& out_path,
                         Nvfp4ScaleRule rule = Nvfp4ScaleRule::kF32Divide);

}  // namespace h3rt
