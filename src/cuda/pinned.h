// Page-locked host memory (cudaMallocHost), owned: stream-ordered copies from and to it can be
// captured in a CUDA graph, and they run asynchronously with respect to the host.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "cuda/runtime.h"

namespace h3rt::cuda {

class Pinned {
 public:
  Pinned() = default;
  explicit Pinned(size_t bytes) : bytes_(bytes) {
    if (bytes) H3RT_CUDA_CHECK(cudaMallocHost(&p_, bytes));
  }
  ~Pinned() {
    if (p_) cudaFreeHost(p_);
  }
  Pinned(Pinned&& o) noexcept : p_(o.p_), bytes_(o.bytes_) {
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  Pinned& operator=(Pinned&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace h3rt::cuda
