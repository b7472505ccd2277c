// Host-side work splitting for the CPU reference ops. Results must not depend on the split:
// callers give every output to exactly one range and compute it in a fixed order.
#pragma once

#include <cstdint>
#include <functional>

namespace h3rt {

// Threads worth starting for `work` multiply-adds: one per ~1M (far more than a thread's start),
// at most the hardware's, and at most 16.
int64_t threads_for_work(double work);

// Calls fn(begin, end) on `threads` contiguous ranges covering [0, n), each on its own thread;
// the calling thread takes the first range, and also runs any range whose thread cannot be
// started. Returns when all are done.
void parallel_ranges(int64_t n, int64_t threads, const std::function<void(int64_t, int64_t)>& fn);

struct CopyPiece {
  void* dst;
  const void* src;
  int64_t bytes;
};
// Copies every piece, in 16 MB chunks over up to `threads` threads: one thread's memcpy reads
// the page cache, or faults a mapped file in, well below PCIe speed (weight streaming's file
// source; `h3rt bench load --gather` measures it). Never throws (it runs on CUDA's callback
// thread): chunks whose thread cannot start are copied by the caller.
void parallel_copy(const std::vector<CopyPiece>& pieces, int64_t threads = 8) noexcept;

}  // namespace h3rt
