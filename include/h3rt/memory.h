// Host memory accounting: every buffer the runtime allocates on the host goes through
// TrackedAllocator, so reports can state current and peak host bytes. Running out of host or
// device memory throws OutOfMemory naming what was being allocated (the MemoryScope labels of
// the allocating thread), its size, what is in use and the peak.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include "h3rt/check.h"

namespace h3rt {

struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
};

MemoryStats host_memory_stats();
void reset_host_peak();  // peak := current
void* host_alloc(size_t bytes);
void host_free(void* p, size_t bytes) noexcept;

class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// Names what the calling thread allocates while it lives ("weights of blocks.3", "forward
// session for 37810 rows"); nested scopes read outer / inner in OutOfMemory messages.
class MemoryScope {
 public:
  explicit MemoryScope(std::string what);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;
};
// The calling thread's scopes joined by " / ", or "" outside any.
std::string memory_scope();
// "1.50 GiB" style sizes for messages.
std::string format_bytes(int64_t bytes);

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
