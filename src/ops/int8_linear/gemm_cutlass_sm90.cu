// The CUTLASS sm_90a path of int8_linear_cuda (int8_linear.h): not built yet, so the dispatcher
// always takes cuBLASLt.
#include "ops/int8_linear/int8_linear_paths.h"

namespace h3rt::ops::int8_detail {

bool cutlass_sm90_compiled() {
  return false;
}

bool cutlass_sm90_supports(const Int8LinearCudaParams&) {
  return false;
}

cudaError_t int8_linear_cutlass_sm90(const Int8LinearCudaParams&, cudaStream_t) {
  return cudaErrorNotSupported;
}

}  // namespace h3rt::ops::int8_detail
