#include <cuda_runtime.h>

#include <sstream>

#include "cuda/host_register.h"

namespace h3rt::cuda {

namespace {

bool read_only_supported() {
  int dev = 0, on = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&on, cudaDevAttrHostRegisterReadOnlySupported, dev) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return on != 0;
}

// Whether p is in page-locked memory CUDA knows (cudaHostAlloc'd or registered).
bool already_pinned(const void* p) {
  cudaPointerAttributes a{};
  const bool pinned =
      cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeHost;
  cudaGetLastError();
  return pinned;
}

}  // namespace

std::unique_ptr<HostRegistration> HostRegistration::make(const std::vector<HostRange>& ranges,
                                                         std::string& why) {
  std::unique_ptr<HostRegistration> r(new HostRegistration());
  const bool read_only = read_only_supported();
  for (const HostRange& h : ranges) {
    void* p = reinterpret_cast<void*>(h.begin);
    const size_t n = static_cast<size_t>(h.end - h.begin);
    // The caller's pinned tensors: copies already run as DMA (a range that is pinned at one end
    // only is registered, and fails, so that nothing is copied from pageable memory).
    if (already_pinned(p) && already_pinned(static_cast<char*>(p) + n - 1)) continue;
    cudaError_t err = cudaHostRegister(p, n, cudaHostRegisterDefault);
    if (err != cudaSuccess && read_only) {  // e.g. a file mapped read-only
      cudaGetLastError();
      err = cudaHostRegister(p, n, cudaHostRegisterReadOnly);
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      std::ostringstream s;
      s << "cannot register " << n / 1e9 << " GB of host memory at " << p << " with CUDA ("
        << cudaGetErrorString(err) << (read_only ? "" : "; read-only registration unsupported")
        << ")";
      why = s.str();
      return nullptr;  // the destructor undoes the ranges registered so far
    }
    r->registered_.push_back(p);
    r->bytes_ += static_cast<int64_t>(n);
  }
  return r;
}

HostRegistration::~HostRegistration() {
  for (void* p : registered_) cudaHostUnregister(p);
}

}  // namespace h3rt::cuda
