// The GEMM paths behind int8_linear_cuda (int8_linear.h); the dispatcher is in int8_linear.cu.
#pragma once

#include "ops/int8_linear/int8_linear.h"

namespace h3rt::ops::int8_detail {

// gemm_cutlass_sm90.cu: whether the CUTLASS kernel is in this build (H3RT_HAVE_CUTLASS and
// sm_90a in the arch list), whether `p` meets its alignment rules, and the launch
// (cudaErrorNotSupported when not compiled in).
bool cutlass_sm90_compiled();
bool cutlass_sm90_supports(const Int8LinearCudaParams& p);
cudaError_t int8_linear_cutlass_sm90(const Int8LinearCudaParams& p, cudaStream_t stream);

}  // namespace h3rt::ops::int8_detail
