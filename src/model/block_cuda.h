// One H3 DiT block on the GPU in bf16 (README section 5-6 rounding points), composed from the
// fused launchers of src/ops: ten launches, no Q/K/V or layout copies.
//
//   1 rmsnorm_modulate    n = norm1(x) * (1 + scale_msa) + shift_msa      (table row per row)
//   2 linear (cuBLASLt)   qkv = n Wqkv^T                                   [S, 3I]
//   3 qk_norm_rope        per-head RMSNorm + RoPE of q and k, in place on qkv
//   4 attention           flash bf16 reading q/k/v through strides         -> attn [S, I]
//   5 linear              y = attn Wout^T
//   6 rmsnorm_modulate    x += gate_msa * y; n = norm2(x) * (1 + scale_mlp) + shift_mlp
//   7 linear              h = n Wfc1^T                                     [S, 2F]
//   8 swiglu              g = silu(h[:, :F]) * h[:, F:]
//   9 linear              y = g Wfc2^T
//  10 gated_residual      x += gate_mlp * y
// fp8 layers add one quantize launch before each of their GEMMs.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "h3rt/model.h"
#include "h3rt/tensor.h"

namespace h3rt::model {

// A linear layer on the device: y = x W^T (+ b). With `w8` set it runs as an fp8 e4m3
// per-tensor-scaled GEMM (ComfyUI fp8_scaled with a static input scale): the bf16 activation is
// quantized to e4m3 with `x_scale`, and the product scaled by x_scale * w_scale.
struct DeviceLinear {
  Tensor w;  // [out, in], bf16 or f32 (as the checkpoint stores the layer)
  Tensor b;  // [out] in the same dtype, or empty
  int64_t out = 0, in = 0;
  Tensor w8;                // [out, in] e4m3, or empty
  Tensor w_scale, x_scale;  // device float32 scalars of the fp8 path
  bool fp8() const { return w8.data() != nullptr; }
};

// Device copies (bf16) of one block's weights.
struct DeviceBlock {
  Tensor norm1, norm2, q_norm, k_norm;  // [H], [H], [128], [128]
  DeviceLinear qkv, out, fc1, fc2;      // [3I, H], [H, I], [2F, H], [H, F], no bias
  DeviceLinear adaln;                   // [18H, Tm] with bias (transformer blocks only)
};
// Uploads a block's weights (model_cuda.cu); bf16 layers only.
DeviceBlock upload_block(const RefinerBlockWeights& w);

// The activations of one block at S rows, allocated once and reused across blocks.
struct BlockCudaBuffers {
  int64_t rows = 0, hidden = 0, heads = 0, ffn = 0;
  Tensor x;          // [S, H] residual stream, updated in place
  Tensor n;          // [S, H] normalized + modulated
  Tensor qkv;        // [S, 3I]
  Tensor attn;       // [S, I]
  Tensor y;          // [S, H] projection outputs
  Tensor h;          // [S, 2F]
  Tensor g;          // [S, F]
  Tensor table;      // [3M, 6H] modulation table (shift_msa, scale_msa, gate_msa, shift_mlp, ...)
  Tensor row_index;  // [S] int64: timestep_index * 3 + tag
  Tensor cos, sin;   // [S, 96] float32 RoPE tables
  Tensor x8;         // [S, max(H, I, F)] e4m3 activations of fp8 layers (empty without them)
};
BlockCudaBuffers make_block_buffers(const H3Config& c, int64_t rows, int64_t table_rows,
                                    bool fp8 = false);

// Called after each stage with its name (the seeds' component names) when timing per component.
using StageHook = std::function<void(const char* component)>;

// `refiner` runs a token-refiner block instead: no modulation (plain RMSNorms, ungated
// residuals, no table) and no RoPE; attention over the buffers' rows only.
void block_forward_cuda(const H3Config& c, const DeviceBlock& w, BlockCudaBuffers& b,
                        cudaStream_t stream, const StageHook* hook = nullptr, bool refiner = false);

// Launches block_forward_cuda issues (kernels and cuBLASLt calls), for reports.
constexpr int kBlockLaunches = 10;

}  // namespace h3rt::model
#endif  // H3RT_HAVE_CUDA
