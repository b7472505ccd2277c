// strided_copy: dst[i] = src[i] over one shape (at most kMaxDims axes), each side with its own
// element strides and dtype (f32 or bf16; f32 -> bf16 rounds to nearest even, bf16 -> f32 is
// exact). With a permuted view on one side it is a layout change: ComfyUI's latents as h3rt's
// patch rows and back (h3rt/device.h video_rows_view), on the host or on the device.
#pragma once

#include <cstdint>

#include "h3rt/dtype.h"

namespace h3rt::ops {

constexpr int kStridedCopyMaxDims = 8;

struct StridedCopyParams {
  const void* src = nullptr;
  void* dst = nullptr;
  DType src_dtype = DType::f32, dst_dtype = DType::f32;  // f32 or bf16 each
  int ndim = 0;
  int64_t shape[kStridedCopyMaxDims] = {};
  int64_t src_strides[kStridedCopyMaxDims] = {};  // in elements
  int64_t dst_strides[kStridedCopyMaxDims] = {};
  int64_t numel() const;
};

// The reference: a loop over the elements in C order.
void strided_copy_cpu(const StridedCopyParams& p);

}  // namespace h3rt::ops

#ifdef H3RT_HAVE_CUDA
#include <cuda_runtime_api.h>
namespace h3rt::ops {
// One grid-stride launch on `stream`, no synchronisation; same values as strided_copy_cpu.
cudaError_t strided_copy_cuda(const StridedCopyParams& p, cudaStream_t stream);
}  // namespace h3rt::ops
#endif
