// strided_copy on the GPU (strided_copy.h): one thread per element (grid-stride), the C-order
// index split into coordinates, the bf16 rounding written as the host reference's bit formula so
// that both give the same bits (NaN included).
#include <algorithm>

#include "core/host_device.h"
#include "ops/strided_copy/strided_copy.h"

namespace h3rt::ops {
namespace {

__device__ __forceinline__ float load(const void* p, bool bf16, int64_t i) {
  if (!bf16) return static_cast<const float*>(p)[i];
  return __uint_as_float(uint32_t(static_cast<const uint16_t*>(p)[i]) << 16);
}

__device__ __forceinline__ void store(void* p, bool bf16, int64_t i, float v) {
  if (!bf16) {
    static_cast<float*>(p)[i] = v;
    return;
  }
  static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(bf16_bits_rne(v));
}

__global__ void strided_copy_kernel(StridedCopyParams p, int64_t n) {
  const bool sb = p.src_dtype == DType::bf16, db = p.dst_dtype == DType::bf16;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = k, s = 0, d = 0;
    for (int a = p.ndim - 1; a >= 0; --a) {
      const int64_t i = rest % p.shape[a];
      rest /= p.shape[a];
      s += i * p.src_strides[a];
      d += i * p.dst_strides[a];
    }
    store(p.dst, db, d, load(p.src, sb, s));
  }
}

bool supported(DType t) {
  return t == DType::f32 || t == DType::bf16;
}

}  // namespace

cudaError_t strided_copy_cuda(const StridedCopyParams& p, cudaStream_t stream) {
  if (p.ndim < 0 || p.ndim > kStridedCopyMaxDims || !supported(p.src_dtype) ||
      !supported(p.dst_dtype))
    return cudaErrorInvalidValue;
  const int64_t n = p.numel();
  if (n == 0) return cudaSuccess;
  const int grid = static_cast<int>(std::min<int64_t>((n + 255) / 256, 8192));
  strided_copy_kernel<<<grid, 256, 0, stream>>>(p, n);
  return cudaGetLastError();
}

}  // namespace h3rt::ops
