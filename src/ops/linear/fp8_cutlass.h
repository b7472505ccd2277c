// The CUTLASS 4.2 sm_90a path of linear_fp8_cuda (linear.h): a warp-specialized persistent
// TMA/wgmma e4m3 x e4m3 GEMM, cooperative 128x128x128 tiles, cluster 2x1, without fast
// accumulation (CUTLASS's fp8 mainloop promotes the wgmma accumulators into float32 after every
// 4 wgmma k-steps, i.e. once per 128-wide k-block; its second set of accumulators is why the
// 128x256 tile, which the int8 kernel uses, spills here: 816 bytes of spill stores at 168
// registers, against none for 128x128, ptxas -v for sm_90a), with the block's
// epilogue in an EVT: y = bf16(f32(acc) * (x_scale * w_scale) + bias), the two device scalars
// multiplied once, the bias a bf16 per-column broadcast (null: -0.0, which leaves every value
// unchanged). Not bit-identical with cuBLASLt (accumulation order): both are checked against
// fp64 within the same bound. Which path runs: Fp8GemmPath (linear.h). Constraints: in, the x
// row stride % 16 == 0, y row stride % 8 == 0, 16-byte aligned x, w, y; compute capability 9.0
// and a build with CUTLASS's sm90 kernels (CUTLASS headers, CMake option H3RT_CUTLASS_SM90 ON,
// sm_90a); otherwise cudaErrorNotSupported.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "ops/linear/linear.h"

namespace h3rt::ops::fp8_detail {

bool cutlass_sm90_compiled();
cudaError_t linear_fp8_cutlass_sm90(const LinearFp8CudaParams& p, cudaStream_t stream);

}  // namespace h3rt::ops::fp8_detail
#endif  // H3RT_HAVE_CUDA
