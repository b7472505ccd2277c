// int8 layers around the blocks on the GPU (see io_int8_cuda.h).
#include <algorithm>

#include "cuda/runtime.h"
#include "h3rt/check.h"
#include "model/io_int8_cuda.h"

namespace h3rt::model {
namespace {

using bf16 = __nv_bfloat16;

__global__ void f32_to_bf16_rows_kernel(const float* src, int64_t src_stride, bf16* dst,
                                        int64_t dst_stride, int64_t rows, int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    dst[r * dst_stride + c] = __float2bfloat16_rn(src[r * src_stride + c]);
  }
}

__global__ void bf16_to_f32_rows_kernel(const bf16* src, int64_t src_stride, float* dst,
                                        int64_t rows, int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    dst[i] = __bfloat162float(src[r * src_stride + c]);
  }
}

int grid_for(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 8192)));
}

}  // namespace

void f32_to_bf16_rows_cuda(const float* src, int64_t src_stride, bf16* dst, int64_t dst_stride,
                           int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows * cols == 0) return;
  f32_to_bf16_rows_kernel<<<grid_for(rows * cols), 256, 0, s>>>(src, src_stride, dst, dst_stride,
                                                                rows, cols);
  H3RT_CUDA_CHECK(cudaGetLastError());
}

void bf16_to_f32_rows_cuda(const bf16* src, int64_t src_stride, float* dst, int64_t rows,
                           int64_t cols, cudaStream_t s) {
  if (rows * cols == 0) return;
  bf16_to_f32_rows_kernel<<<grid_for(rows * cols), 256, 0, s>>>(src, src_stride, dst, rows, cols);
  H3RT_CUDA_CHECK(cudaGetLastError());
}

void int8_project_f32_in_cuda(const DeviceLinear& l, const float* x, bf16* stage, bf16* y,
                              int64_t rows, const Int8Activation& a, cudaStream_t s) {
  if (rows == 0) return;
  f32_to_bf16_rows_cuda(x, l.in, stage, l.in, rows, l.in, s);
  int8_project_cuda(l, stage, y, rows, a, s);
}

void int8_project_f32_out_cuda(const DeviceLinear& l, const bf16* x, bf16* stage, float* y,
                               int64_t rows, const Int8Activation& a, cudaStream_t s) {
  if (rows == 0) return;
  int8_project_cuda(l, x, stage, rows, a, s);
  bf16_to_f32_rows_cuda(stage, l.out, y, rows, l.out, s);
}

Int8Activation int8_io_activation(BlockCudaBuffers& b, int64_t rows, int64_t in, const char* what) {
  H3RT_CHECK(b.xi8.data() != nullptr && rows * in <= b.xi8.numel() && rows <= b.xi8_scale.numel(),
             "int8 layer ", what, ": the int8 activation buffers (", b.xi8.numel(),
             " values) do not hold ", rows, " x ", in);
  return int8_activation(b);
}

}  // namespace h3rt::model
