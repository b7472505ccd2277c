// The GEMM paths behind int8_linear_cuda (int8_linear.h); the dispatcher is in int8_linear.cu.
#pragma once

#include <cstdint>

#include "cuda/runtime.h"
#include "ops/int8_linear/int8_linear.h"

namespace h3rt::ops::int8_detail {

// The operand rules every CUTLASS kernel here shares: 16-byte aligned x, w and y and their rows
// (x in int8, y in bf16), and int32 problem extents.
inline bool cutlass_operands_supported(const Int8LinearCudaParams& p) {
  return p.in % 16 == 0 && p.x_row_stride % 16 == 0 && p.y_row_stride % 8 == 0 &&
         cuda::aligned16(p.x) && cuda::aligned16(p.w) && cuda::aligned16(p.y) &&
         p.rows < (int64_t(1) << 31) && p.out < (int64_t(1) << 31);
}

// The persistent tile scheduler's run-time arguments of the CUTLASS kernels: raster order
// (CUTLASS's heuristic rasterizes along M when there are more N tiles than M tiles, else along
// N) and swizzle (1, 2, 4 or 8: that many clusters along the other mode in a row).
enum class CutlassRaster : uint8_t { kHeuristic, kAlongN, kAlongM };
struct CutlassSchedule {
  CutlassRaster raster = CutlassRaster::kHeuristic;
  int swizzle = 1;
};

// gemm_cutlass_sm90.cu: whether the CUTLASS kernels are in this build (CUTLASS headers, CMake
// option H3RT_CUTLASS_SM90 ON and sm_90a in the arch list) and whether `p` meets their alignment
// rules (the same for every kernel: TMA wants 16-byte aligned x, w and y rows).
bool cutlass_sm90_compiled();
bool cutlass_sm90_supports(const Int8LinearCudaParams& p);
// The kernels, one TU each (cudaErrorNotSupported when not compiled in or when CUTLASS's
// can_implement refuses the arguments):
//  gemm_cutlass_sm90.cu:           cooperative 256x128x128, cluster 2x1 (the original kernel)
//  gemm_cutlass_sm90_128x256.cu:   cooperative 128x256x128, cluster 2x1
// (a ping-pong 128x128 kernel's GEMMs were slower in the block at both user shapes; it was
// retired: bench/RESULTS.md sessions 18, 21 and 38).
cudaError_t int8_linear_cutlass_sm90(const Int8LinearCudaParams& p, CutlassSchedule s,
                                     cudaStream_t stream);
cudaError_t int8_linear_cutlass_sm90_128x256(const Int8LinearCudaParams& p, CutlassSchedule s,
                                             cudaStream_t stream);

// gemm_cutlass_sm80.cu: the mma.sync kernel (CUTLASS 2.x API, Sm80 instructions, 128x256x64
// tiles, EVT epilogue), the default on sm_120 / sm_121 (tested through its sm_90a build). Compiled
// with H3RT_HAVE_CUTLASS; runs on any sm_80+ device the binary has code for. cudaErrorNotSupported
// as above.
bool cutlass_sm80_compiled();
bool cutlass_sm80_supports(const Int8LinearCudaParams& p);
cudaError_t int8_linear_cutlass_sm80(const Int8LinearCudaParams& p, cudaStream_t stream);

}  // namespace h3rt::ops::int8_detail
