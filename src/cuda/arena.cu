#include <algorithm>
#include <cstring>

#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "h3rt/memory.h"

namespace h3rt::cuda {

namespace {
constexpr size_t kSmallStep = 512;
constexpr size_t kLargeLimit = size_t(1) << 20;
constexpr size_t kLargeStep = size_t(2) << 20;
size_t round_up(size_t v, size_t m) {
  return (v + m - 1) / m * m;
}
}  // namespace

size_t DeviceArena::bucket_size(size_t bytes) {
  return bytes <= kLargeLimit ? round_up(bytes, kSmallStep) : round_up(bytes, kLargeStep);
}

// Called with mu_ held, after the cache was given back and the retry failed.
void DeviceArena::fail_allocation(size_t bytes, cudaError_t err) const {
  const std::string what = memory_scope();
  const std::string sizes = detail::concat(
      " (", cudaGetErrorString(err), "); the arena holds ", format_bytes(st_.current_allocated),
      " in use (peak ", format_bytes(st_.peak_allocated), "), ", format_bytes(st_.current_reserved),
      " reserved from the driver (peak ", format_bytes(st_.peak_reserved), ")");
  size_t free_b = 0, total_b = 0;
  std::string device;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
    device = detail::concat("; the GPU has ", format_bytes(static_cast<int64_t>(free_b)),
                            " free of ", format_bytes(static_cast<int64_t>(total_b)));
  cudaGetLastError();
  const std::string head = detail::concat("allocating ", format_bytes(static_cast<int64_t>(bytes)),
                                          what.empty() ? "" : " for " + what);
  if (err != cudaErrorMemoryAllocation) H3RT_FAIL("cudaMalloc ", head, " failed", sizes, device);
  throw OutOfMemory(detail::concat(
      "out of device memory ", head, sizes, device,
      ". A model larger than the GPU runs with its blocks' weights streamed from host memory "
      "(--device-memory-limit auto, or a size; device_memory_limit=\"auto\" in Python, the C "
      "API and the ComfyUI node). Less is needed with a quantized checkpoint (h3rt "
      "quantize-checkpoint --format fp8|int8_convrot|nvfp4: 1 byte or less per weight instead "
      "of 2) or fewer frames or pixels (--frames, --width, --height)"));
}

DeviceArena::~DeviceArena() {
  release_cached();
}

void* DeviceArena::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t b = bucket_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  auto it = free_.find(b);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    cudaError_t err = cudaMalloc(&p, b);
    if (err == cudaErrorMemoryAllocation) {  // give the cache back to the driver and retry once
      cudaGetLastError();
      for (auto& [size, blocks] : free_)
        for (void* q : blocks) {
          cudaFree(q);
          st_.current_reserved -= static_cast<int64_t>(size);
        }
      free_.clear();
      err = cudaMalloc(&p, b);
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      fail_allocation(b, err);
    }
    ++st_.cuda_malloc_calls;
    st_.current_reserved += static_cast<int64_t>(b);
    st_.peak_reserved = std::max(st_.peak_reserved, st_.current_reserved);
  }
  live_.emplace(p, b);
  st_.current_allocated += static_cast<int64_t>(b);
  st_.peak_allocated = std::max(st_.peak_allocated, st_.current_allocated);
  return p;
}

void DeviceArena::free(void* p) noexcept {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) return;  // not ours; ignoring beats corrupting the lists
  st_.current_allocated -= static_cast<int64_t>(it->second);
  free_[it->second].push_back(p);
  live_.erase(it);
}

void DeviceArena::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, blocks] : free_)
    for (void* q : blocks) {
      cudaFree(q);
      st_.current_reserved -= static_cast<int64_t>(size);
    }
  free_.clear();
}

DeviceMemoryStats DeviceArena::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return st_;
}

void DeviceArena::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  st_.peak_allocated = st_.current_allocated;
  st_.peak_reserved = st_.current_reserved;
}

DeviceArena& default_arena() {
  static DeviceArena* arena = new DeviceArena();  // intentionally leaked: outlives all tensors
  return *arena;
}

Tensor device_empty(DType dtype, Shape shape, DeviceArena& arena) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape) * dtype_size(dtype));
  void* p = arena.allocate(bytes);
  std::shared_ptr<void> owner(p, [&arena](void* q) { arena.free(q); });
  return Tensor(p, dtype, std::move(shape), std::move(owner), Device::cuda);
}

Tensor to_device(const Tensor& host, cudaStream_t stream, DeviceArena& arena) {
  H3RT_CHECK(host.device() == Device::cpu, "to_device: source tensor is not on the host");
  Tensor src = host.is_contiguous() ? host : host.contiguous_copy();
  Tensor dst = device_empty(src.dtype(), src.shape(), arena);
  if (src.nbytes() > 0) {
    H3RT_CUDA_CHECK(
        cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyHostToDevice, stream));
    H3RT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return dst;
}

Tensor to_host(const Tensor& dev, cudaStream_t stream) {
  H3RT_CHECK(dev.device() == Device::cuda, "to_host: source tensor is not on the device");
  H3RT_CHECK(dev.is_contiguous(), "to_host: device tensor ", shape_str(dev.shape()),
             " is not contiguous");
  Tensor dst = Tensor::zeros(dev.dtype(), dev.shape());
  if (dev.nbytes() > 0) {
    H3RT_CUDA_CHECK(
        cudaMemcpyAsync(dst.data(), dev.data(), dev.nbytes(), cudaMemcpyDeviceToHost, stream));
    H3RT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return dst;
}

}  // namespace h3rt::cuda
