// Host memory accounting: every buffer the runtime allocates on the host goes through
// TrackedAllocator, so reports can state current and peak host bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace h3rt {

struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
};

MemoryStats host_memory_stats();
void reset_host_peak();  // peak := current
void* host_alloc(size_t bytes);
void host_free(void* p, size_t bytes) noexcept;

template <typename T>
struct TrackedAllocator {
  using value_type = T;
  TrackedAllocator() = default;
  template <typename U>
  TrackedAllocator(const TrackedAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(host_alloc(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { host_free(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const TrackedAllocator<U>&) const {
    return true;
  }
};

// The float buffer of the CPU reference.
using FloatVec = std::vector<float, TrackedAllocator<float>>;

}  // namespace h3rt
