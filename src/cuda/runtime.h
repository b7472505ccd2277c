// Device runtime basics: error checks, device discovery, compiled-arch dispatch, streams and
// NVTX ranges. Everything here is host code; kernels include src/cuda/device_math.cuh instead.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "h3rt/check.h"

namespace h3rt::cuda {

[[noreturn]] void fail_cuda(cudaError_t err, const char* expr, const char* file, int line);

// After a launch: picks up launch-configuration errors (cudaGetLastError, no synchronisation).
// Debug builds (no NDEBUG) and builds defining H3RT_DEBUG_SYNC also synchronise the device, so a
// faulting kernel is reported at its own launch site. Failures are logged and returned.
cudaError_t check_launch(const char* what, const char* file, int line);

// Whether `p` is 16-byte aligned (what vector loads, cp.async and TMA want).
inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// True when the CUDA runtime works and at least one device is present. Tests GTEST_SKIP on false.
bool cuda_device_available();

// Empty when a CUDA device can be used; otherwise why not, in a user's terms, starting with
// "no CUDA device is available" (e.g. the driver is older than this build's CUDA runtime).
std::string cuda_device_unavailable_reason();

// The same text from cudaGetDeviceCount's result and the driver's and runtime's CUDA versions
// (cudaDriverGetVersion gives 0 without a driver), for tests of every form.
std::string device_unavailable_text(cudaError_t count_error, int count, int driver_version,
                                    int runtime_version);

// Throws h3rt::Error("<what> needs a CUDA device, and " + the reason above) when none is usable.
void require_cuda_device(const std::string& what);

// Compute capability of the current device as major*10+minor (90 for an H200, 121 for a GB10).
int current_device_cc();

// The compiled arch (major*10+minor, e.g. 90 for "90a") whose code runs on a device of
// compute capability cc_major.cc_minor, or 0 when none does. Parses H3RT_CUDA_ARCH_LIST
// ("90a,121a"): an "a" arch runs only on its exact cc; an "f" arch on its family (same major,
// minor >= its own); a plain arch on the same major with minor >= its own (SASS compatibility).
// Prefers an exact match. `list` defaults to the compile-time list.
int compiled_arch_supports(int cc_major, int cc_minor);
int compiled_arch_supports(int cc_major, int cc_minor, const std::string& list);
// Whether the compile-time arch list names `arch` exactly (e.g. "90a": wgmma/TMA kernels exist).
bool compiled_arch_listed(const std::string& arch);
// "" when `list` (default: the compile-time one) has code for a device of compute capability cc
// (major * 10 + minor) named `device`, else the error for the user: what the build has, what
// the device is, and how to rebuild.
std::string arch_support_error(int cc, const std::string& device, const std::string& list);
std::string arch_support_error(int cc, const std::string& device);

// Persistent-grid size for `kernel` (a __global__ function) with `threads` per CTA and `smem`
// bytes of dynamic shared memory: CTAs resident per SM (occupancy query, after raising the
// kernel's dynamic shared-memory limit) x SMs. 0 when the device's compute capability major is
// below `min_major`, the shared memory exceeds the opt-in limit, or no CTA fits.
int resident_grid(const void* kernel, int threads, size_t smem, int min_major);
// The SM count of `device`, queried once per device (launch arguments of persistent kernels).
int sm_count(int device);
// The most shared memory one block of `device` may opt in to (bytes), queried once per device.
int smem_optin(int device);
// The name of `device` (cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"), queried once per
// device: the per-GPU tables of measured kernel choices key on it.
const std::string& device_name(int device);

// An owned stream (non-blocking w.r.t. the legacy default stream). Launchers take the raw handle.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  cudaStream_t get() const { return s_; }
  operator cudaStream_t() const { return s_; }
  void synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

// An NVTX range that lasts for the scope (visible in Nsight Systems per component).
class NvtxRange {
 public:
  explicit NvtxRange(const char* name);
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace h3rt::cuda

#define H3RT_CUDA_CHECK(expr)                                                                    \
  do {                                                                                           \
    cudaError_t h3rt_err_ = (expr);                                                              \
    if (h3rt_err_ != cudaSuccess) ::h3rt::cuda::fail_cuda(h3rt_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch inside a launcher: returns the error (launchers return cudaError_t).
#define H3RT_LAUNCH_CHECK(what) ::h3rt::cuda::check_launch(what, __FILE__, __LINE__)

#define H3RT_NVTX_CAT2_(a, b) a##b
#define H3RT_NVTX_CAT_(a, b) H3RT_NVTX_CAT2_(a, b)
#define H3RT_NVTX_RANGE(name) ::h3rt::cuda::NvtxRange H3RT_NVTX_CAT_(h3rt_nvtx_, __LINE__)(name)
