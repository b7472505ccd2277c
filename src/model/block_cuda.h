// One H3 DiT block on the GPU in bf16 (README section 5-6 rounding points), composed from the
// fused launchers of src/ops: ten launches, no Q/K/V or layout copies.
//
//   1 rmsnorm_modulate    n = norm1(x) * (1 + scale_msa) + shift_msa      (table row per row)
//   2 linear (cuBLASLt)   qkv = n Wqkv^T                                   [S, 3I]
//   3 qk_norm_rope        per-head RMSNorm + RoPE of q and k, in place on qkv
//   4 attention           flash bf16 (or Sage 8-bit: + its pre-pass launch) reading q/k/v
//                         through strides                                  -> attn [S, I]
//   5 linear              y = attn Wout^T
//   6 rmsnorm_modulate    x += gate_msa * y; n = norm2(x) * (1 + scale_mlp) + shift_mlp
//   7 linear              h = n Wfc1^T                                     [S, 2F]
//   8 swiglu              g = silu(h[:, :F]) * h[:, F:]
//   9 linear              y = g Wfc2^T
//  10 gated_residual      x += gate_mlp * y   (chained blocks: in the next block's step 1)
// fp8 layers add one quantize launch before each of their GEMMs (two with a dynamic activation
// scale: amax partials, then scale + encode; src/ops/fp8_quantize). nvfp4 layers with a static
// input scale get their input encoded by its producer (steps 1, 4, 6, 8 write NVFP4 instead of
// bf16); without one, the bf16 input is quantized in two launches (amax, then encode).
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "h3rt/model.h"
#include "h3rt/tensor.h"
#include "ops/attention/attention.h"

namespace h3rt::model {

// A linear layer on the device: y = x W^T (+ b), on one of three paths.
//  * bf16: `w` (bf16, or f32 on the float32 islands).
//  * fp8 (`w8` set): ComfyUI fp8_scaled with a static input scale: the bf16 activation is
//    quantized to e4m3 with `x_scale`, and the product scaled by x_scale * w_scale. Without
//    `x_scale` (opt-in dynamic activations), the scale s = amax|x| / 448 of each call's
//    activation is computed on the device (fp8_quantize_dynamic_cuda) and used in its place.
//  * int8 (`wi8` set): ComfyUI int8_tensorwise W8A8, with convrot when int8_group > 0: each
//    call rotates (group-wise Hadamard) and quantizes the bf16 activation per row, then the int8
//    GEMM applies both scales and the bias (src/ops/int8_linear), bit-exact with the CPU.
//  * nvfp4 (`w4` set): W4A4. The bf16 activation is quantized to NVFP4 with `x4_global` (the
//    checkpoint's input_scale) or, without one, with the global scale computed from its amax
//    (ComfyUI's bf16 activation rule); then the NVFP4 GEMM (src/ops/linear_nvfp4).
struct DeviceLinear {
  Tensor w;  // [out, in], bf16 or f32 (as the checkpoint stores the layer)
  Tensor b;  // [out] in the same dtype, or empty
  int64_t out = 0, in = 0;
  Tensor w8;                // [out, in] e4m3, or empty
  Tensor w_scale, x_scale;  // device float32 scalars of the fp8 path; x_scale empty: dynamic
  Tensor w4;                // u8 [out, in/2] packed e2m1 (nvfp4), or empty
  Tensor w4_scales;         // u8 block scales, 128x4 tiled
  Tensor w4_global;         // device float32 scalar (weight_scale_2)
  Tensor x4_global;         // device float32 scalar (input_scale), or empty: computed per call
  Tensor wi8;               // [out, in] int8 (stored rotated when int8_group > 0), or empty
  Tensor wi8_scale;         // device float32 [out]: the per-row weight scale
  int int8_group = 0;
  bool int8() const { return wi8.data() != nullptr; }
  bool fp8() const { return w8.data() != nullptr; }
  bool fp8_dynamic() const { return fp8() && x_scale.data() == nullptr; }
  bool nvfp4() const { return w4.data() != nullptr; }
};

// The device buffers of an int8 W8A8 projection's activation: q [rows, in] int8 and scale [rows]
// (written by the rotate+quantize step or a fused producer), and the GEMM's workspace.
struct Int8Activation {
  int8_t* q;
  float* scale;
  void* workspace;
  size_t workspace_bytes;
};
// y [rows, l.out] bf16 = the int8 layer l (l.int8()) of the activation already in a: the int8
// GEMM with both scales and l's bias in the epilogue (src/ops/int8_linear).
void int8_gemm_cuda(const DeviceLinear& l, const Int8Activation& a, __nv_bfloat16* y, int64_t rows,
                    cudaStream_t s);
// The same from x [rows, l.in] bf16: its rows rotated (convrot group l.int8_group) and quantized
// into a, then the GEMM.
void int8_project_cuda(const DeviceLinear& l, const __nv_bfloat16* x, __nv_bfloat16* y,
                       int64_t rows, const Int8Activation& a, cudaStream_t s);

// Device copies (bf16) of one block's weights.
struct DeviceBlock {
  Tensor norm1, norm2, q_norm, k_norm;  // [H], [H], [128], [128]
  DeviceLinear qkv, out, fc1, fc2;      // [3I, H], [H, I], [2F, H], [H, F], no bias
  DeviceLinear adaln;                   // [18H, Tm] with bias (transformer blocks only)
};
// Uploads a block's weights (model_cuda.cu).
DeviceBlock upload_block(const RefinerBlockWeights& w);

// The activations of one block at S rows, allocated once and reused across blocks.
struct BlockCudaBuffers {
  int64_t rows = 0, hidden = 0, heads = 0, ffn = 0;
  Tensor x;           // [S, H] residual stream, updated in place
  Tensor n;           // [S, H] normalized + modulated
  Tensor qkv;         // [S, 3I]
  Tensor attn;        // [S, I]
  Tensor y;           // [S, H] projection outputs
  Tensor h;           // [S, 2F]
  Tensor g;           // [S, F]
  Tensor silu_table;  // [kSiluTableEntries] bf16 round(silu(g)), ops/swiglu/silu_table.h
  Tensor table;       // [3M, 6H] modulation table (shift_msa, scale_msa, gate_msa, shift_mlp, ...)
  Tensor row_index;   // [S] int64: timestep_index * 3 + tag
  Tensor cos, sin;    // [S, 96] float32 RoPE tables
  Tensor x8;          // [S, max(H, I, F)] e4m3 activations of fp8 layers (empty without them)
  // fp8 layers with dynamic activation scales: the current projection's scale (device f32
  // scalar read by its GEMM) and the quantizer's workspace (no initialisation needed).
  Tensor x8_scale, x8_workspace;
  // NVFP4 layers (empty without them): the packed activation, its block scales and global
  // scale, the quantizer's workspace (zeroed once) and the GEMM's scratch.
  Tensor x4, x4_scales, x4_global, x4_workspace, gemm_workspace;
  // int8 layers (empty without them): the rotated, quantized activation [S, widest int8 input:
  // int8_activation_width], its per-row scales and the int8 GEMM's scratch; the int8 layers
  // around the blocks use them too (io_int8_cuda.h).
  Tensor xi8, xi8_scale, int8_workspace;
  // The attention kernel and its workspace (zeroed once; Sage only).
  ops::AttentionKernel attention = ops::AttentionKernel::flash_bf16;
  Tensor attention_workspace;
  // Block-sparse attention (empty until ensure_sparse_buffers): the router's workspace and the
  // device counters [2] (u64: computed, total key-block pairs) the sparse blocks add to.
  Tensor sparse_workspace, sparse_stats;
};
// The int8 activation of b (its xi8, xi8_scale and int8_workspace; throws when b has none).
Int8Activation int8_activation(BlockCudaBuffers& b);

BlockCudaBuffers make_block_buffers(
    const H3Config& c, int64_t rows, int64_t table_rows, bool fp8 = false, bool nvfp4 = false,
    ops::AttentionKernel attention = ops::AttentionKernel::flash_bf16, bool int8 = false);

// Allocates b's sparse workspace and counters once (not during graph capture).
void ensure_sparse_buffers(BlockCudaBuffers& b);

// Block-sparse attention of one block (Sage only; h3rt/sparse.h): the forward's configuration
// and its layout's prefix rows (attention_sparse::prefix_rows_of). Counts go to b.sparse_stats.
// dense_heads (optional, device [heads]): the sparse check's heads that take every key block.
// check (optional): this block's sparse check (h3rt/hybrid.h) right after its attention: the
// attention then also writes its bf16 output to b.attn (as the unfused path does; same bits),
// and b.h, free until the MLP, holds the dense sample (check->dense_out is set here).
struct BlockSparse {
  const SparseAttention* cfg = nullptr;
  int64_t prefix_rows = 0;
  const uint8_t* dense_heads = nullptr;
  const ops::SparseCheckCudaParams* check = nullptr;
};

// Blocks run as a chain (the forward session): the last step of a block, x += gate_mlp * y,
// moves into the next block's first kernel (norm1 then reads x and y once: the residual, the
// norm and its modulation in one pass, as norm2 does with gate_msa), so the residual stream is
// read and written once less per block. Same bits: the same kernel and rounding sequence as the
// standalone residual. `table`: this block's modulation table (null: b.table); `pending`: the
// previous block's table whose gate_mlp residual with b.y is still to add (null: none); `defer`:
// leave this block's own gate_mlp residual to the next block (b.y and `table` must then stay
// untouched until it runs).
struct BlockChain {
  const __nv_bfloat16* table = nullptr;
  const __nv_bfloat16* pending = nullptr;
  bool defer = false;
};

// Called after each stage with its name (the seeds' component names) when timing per component.
using StageHook = std::function<void(const char* component)>;

// `refiner` runs a token-refiner block instead: no modulation (plain RMSNorms, ungated
// residuals, no table) and no RoPE; attention over the buffers' rows only.
// The block projections whose input the producer rotates/quantizes or encodes itself (qkv and fc1
// by rmsnorm_modulate, out by the attention epilogue, fc2 by swiglu): NVFP4 layers with a static
// input scale, int8 convrot qkv / fc1 where rmsnorm_modulate takes the width and group, and int8
// fc2 where the swiglu table path fits the device (H3RT_INT8_FUSE / H3RT_INT8_FUSE_FC2 not 0).
// Names as the block's stages: "qkv", "out", "fc1", "fc2".
std::vector<std::string> fused_projection_inputs(const DeviceBlock& w);

void block_forward_cuda(const H3Config& c, const DeviceBlock& w, BlockCudaBuffers& b,
                        cudaStream_t stream, const StageHook* hook = nullptr, bool refiner = false,
                        const BlockSparse* sparse = nullptr, const BlockChain* chain = nullptr);

// x += gate_mlp * y with the gate of `table` (the step a chained block defers; the chain's last
// block runs it itself).
void gate_mlp_residual_cuda(const H3Config& c, BlockCudaBuffers& b, const __nv_bfloat16* table,
                            cudaStream_t stream);

// Launches block_forward_cuda issues (kernels and cuBLASLt calls), for reports.
constexpr int kBlockLaunches = 10;

}  // namespace h3rt::model
#endif  // H3RT_HAVE_CUDA
