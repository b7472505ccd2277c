// h3rt/device.h: strided copies (the host loop or the CUDA kernel) and device buffers.
#include "h3rt/device.h"

#include "h3rt/check.h"
#include "ops/strided_copy/strided_copy.h"

#ifdef H3RT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda/runtime.h"
#endif

namespace h3rt {
namespace {

ops::StridedCopyParams copy_params(const Tensor& dst, const Tensor& src) {
  H3RT_CHECK(dst.shape() == src.shape(), "copy_strided: shapes differ (", dst.dim(), " vs ",
             src.dim(), " axes)");
  H3RT_CHECK(dst.dim() <= ops::kStridedCopyMaxDims, "copy_strided: at most ",
             ops::kStridedCopyMaxDims, " axes, got ", dst.dim());
  ops::StridedCopyParams p;
  p.src = src.data();
  p.dst = dst.data();
  p.src_dtype = src.dtype();
  p.dst_dtype = dst.dtype();
  p.ndim = static_cast<int>(dst.dim());
  for (int a = 0; a < p.ndim; ++a) {
    p.shape[a] = dst.shape()[a];
    p.src_strides[a] = src.strides()[a];
    p.dst_strides[a] = dst.strides()[a];
  }
  return p;
}

#ifndef H3RT_HAVE_CUDA
[[noreturn]] void no_cuda(const char* what) {
  H3RT_FAIL(what, ": this h3rt was built without CUDA");
}
#endif

}  // namespace

void copy_strided(const Tensor& dst, const Tensor& src, uintptr_t stream) {
  const ops::StridedCopyParams p = copy_params(dst, src);
  H3RT_CHECK(dst.device() == src.device(),
             "copy_strided: one side in host memory, the other in device memory");
  if (dst.device() == Device::cpu) return ops::strided_copy_cpu(p);
#ifdef H3RT_HAVE_CUDA
  H3RT_CUDA_CHECK(ops::strided_copy_cuda(p, reinterpret_cast<cudaStream_t>(stream)));
#else
  (void)stream;
  no_cuda("copy_strided");
#endif
}

Tensor video_rows_view(const Tensor& v) {
  H3RT_CHECK(v.dim() == 5 && v.shape()[0] == 1 && v.shape()[3] % 2 == 0 && v.shape()[4] % 2 == 0,
             "video latents: expected [1, C, T, H, W] with even H and W");
  const Shape& n = v.shape();
  const Shape& s = v.strides();
  return Tensor(v.data(), v.dtype(), {n[2], n[3] / 2, n[4] / 2, n[1], 2, 2},
                {s[2], 2 * s[3], 2 * s[4], s[1], s[3], s[4]}, nullptr, v.device());
}

Tensor comfy_audio_rows_view(const Tensor& a) {
  H3RT_CHECK(a.dim() == 4 && a.shape()[0] == 1 && a.shape()[2] == 2,
             "audio latents: expected [1, C, 2, N]");
  const Shape& n = a.shape();
  const Shape& s = a.strides();
  return Tensor(a.data(), a.dtype(), {2, n[3], n[1]}, {s[2], s[3], s[1]}, nullptr, a.device());
}

#ifdef H3RT_HAVE_CUDA
int cuda_current_device() {
  int d = -1;
  return cudaGetDevice(&d) == cudaSuccess ? d : (cudaGetLastError(), -1);
}

int cuda_device_cc(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return major * 10 + minor;
}

int cuda_pointer_device(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : -1;
}

std::shared_ptr<void> device_alloc(size_t bytes, uintptr_t stream) {
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  void* p = nullptr;
  H3RT_CUDA_CHECK(cudaMallocAsync(&p, bytes ? bytes : 1, s));
  return std::shared_ptr<void>(p, [s](void* q) { cudaFreeAsync(q, s); });
}

void copy_to_host(void* dst, const void* src, size_t bytes, uintptr_t stream) {
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  H3RT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));
}
#else
int cuda_current_device() {
  return -1;
}
int cuda_device_cc(int) {
  return 0;
}
int cuda_pointer_device(const void*) {
  return -1;
}
std::shared_ptr<void> device_alloc(size_t, uintptr_t) {
  no_cuda("device_alloc");
}
void copy_to_host(void*, const void*, size_t, uintptr_t) {
  no_cuda("copy_to_host");
}
#endif

Tensor device_f32(const Shape& shape, uintptr_t stream) {
  std::shared_ptr<void> mem = device_alloc(static_cast<size_t>(shape_numel(shape)) * 4, stream);
  void* p = mem.get();
  return Tensor(p, DType::f32, shape, std::move(mem), Device::cuda);
}

}  // namespace h3rt
