// AdaLN projections stored int8 (an unpruned int8 file's adaln_proj.linear layers, int8_tensorwise
// with or without convrot) on the GPU: the table rows y [M, out] = W8A8(x [M, in]) of the M
// distinct timesteps, through src/ops/int8_linear: the bf16 rows silu(temb) rotated (convrot)
// and quantized per row, then the int8 GEMM with the two-scale epilogue and the bf16 bias.
// Bit-exact with the CPU reference's int8 layer (model/linear_cpu.cpp, h3rt::int8_linear), which
// computes an AdaLN table from the same bf16 input.
// Constraints: any M >= 0 up to the scratch's rows (the GEMM and the quantizer take any row
// count, 1 included: no padding); in a multiple of the convrot group (checked at load); x, y
// contiguous rows.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "h3rt/tensor.h"
#include "model/block_cuda.h"

namespace h3rt::model {

// The quantized activation rows, their scales and the GEMM's workspace for up to `rows` rows of
// `in` features and `out` outputs (the widest AdaLN layer: a block's 18H).
struct AdalnInt8Scratch {
  int64_t rows = 0, in = 0, out = 0;
  Tensor q, scale, workspace;
};
AdalnInt8Scratch make_adaln_int8_scratch(int64_t rows, int64_t in, int64_t out);
// Device bytes make_adaln_int8_scratch allocates (the weight-streaming planner's estimate).
int64_t adaln_int8_scratch_bytes(int64_t rows, int64_t in, int64_t out);

// y [rows, l.out] bf16 (contiguous) = the int8 layer `l` (l.int8()) of x [rows, l.in] bf16.
void adaln_int8_linear(const DeviceLinear& l, const __nv_bfloat16* x, __nv_bfloat16* y,
                       int64_t rows, const AdalnInt8Scratch& scratch, cudaStream_t stream);

}  // namespace h3rt::model
#endif  // H3RT_HAVE_CUDA
