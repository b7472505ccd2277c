// DeviceArena: a caching allocator over cudaMalloc (never managed memory). Requests are rounded
// to size buckets (512 B steps below 1 MiB, 2 MiB steps above) and freed blocks go to a per-bucket
// free list for reuse, so a forward pass that allocates the same shapes every block calls
// cudaMalloc only in its first block. Statistics: current/peak allocated (bytes handed out, in
// bucket sizes) and current/peak reserved (bytes held from the driver). A cudaMalloc that fails
// after the cache was given back throws OutOfMemory (h3rt/memory.h).
//
// Stream semantics: a freed block is reused immediately by the next allocation. That is safe when
// all work using the arena runs on one stream (stream order serialises the reuse); work on other
// streams must be synchronised by the caller before its tensors are released.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "h3rt/tensor.h"

namespace h3rt::cuda {

struct DeviceMemoryStats {
  int64_t current_allocated = 0;
  int64_t peak_allocated = 0;
  int64_t current_reserved = 0;
  int64_t peak_reserved = 0;
  int64_t cuda_malloc_calls = 0;
};

class DeviceArena {
 public:
  DeviceArena() = default;
  ~DeviceArena();  // frees cached blocks; blocks still handed out are leaked on purpose
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  static size_t bucket_size(size_t bytes);

  void* allocate(size_t bytes);  // 256-byte aligned (cudaMalloc alignment); 0 bytes -> nullptr
  void free(void* p) noexcept;
  void release_cached();  // cudaFree every cached (free) block
  DeviceMemoryStats stats() const;
  void reset_peak();  // peaks := current

 private:
  // Throws OutOfMemory (or Error, for other cudaMalloc failures) naming the MemoryScope, the
  // size, the arena's use and peaks and the GPU's free memory, and what needs less.
  [[noreturn]] void fail_allocation(size_t bytes, cudaError_t err) const;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // bucket size -> cached blocks
  std::unordered_map<void*, size_t> live_;     // handed-out block -> bucket size
  DeviceMemoryStats st_;
};

// The process-wide arena (never destroyed, so tensors released at exit stay valid to free).
DeviceArena& default_arena();

// A new contiguous device tensor (uninitialised) whose owner returns the block to `arena`.
// The arena must outlive the tensor.
Tensor device_empty(DType dtype, Shape shape, DeviceArena& arena = default_arena());
// Host <-> device copies of contiguous tensors (synchronous w.r.t. the host after return).
Tensor to_device(const Tensor& host, cudaStream_t stream = nullptr,
                 DeviceArena& arena = default_arena());
Tensor to_host(const Tensor& dev, cudaStream_t stream = nullptr);

}  // namespace h3rt::cuda
