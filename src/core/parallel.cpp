#include "core/parallel.h"

#include <algorithm>
#include <system_error>
#include <thread>
#include <vector>

namespace h3rt {

int64_t threads_for_work(double work) {
  const int64_t hw = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16);
  return std::min(hw, static_cast<int64_t>(work / 1e6) + 1);
}

void parallel_ranges(int64_t n, int64_t threads, const std::function<void(int64_t, int64_t)>& fn) {
  threads = std::clamp<int64_t>(threads, 1, std::max<int64_t>(n, 1));
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t b = n * t / threads, e = n * (t + 1) / threads;
    try {
      pool.emplace_back(fn, b, e);
    } catch (const std::system_error&) {  // no thread to be had: this one does the share
      fn(b, e);
    }
  }
  fn(0, n / threads);
  for (std::thread& t : pool) t.join();
}

}  // namespace h3rt
