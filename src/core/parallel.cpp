#include "core/parallel.h"

#include <algorithm>
#include <cstring>
#include <new>
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
  try {
    pool.reserve(static_cast<size_t>(threads - 1));
  } catch (const std::bad_alloc&) {  // no room for the pool: this thread does it all
    fn(0, n);
    return;
  }
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t b = n * t / threads, e = n * (t + 1) / threads;
    try {  // reserved: no reallocation; a thread that cannot start (or its state) throws here
      pool.emplace_back(fn, b, e);
    } catch (const std::exception&) {  // no thread to be had: this one does the share
      fn(b, e);
    }
  }
  fn(0, n / threads);
  for (std::thread& t : pool) t.join();
}

void parallel_copy(const std::vector<CopyPiece>& pieces, int64_t threads) noexcept {
  constexpr int64_t kChunk = int64_t(16) << 20;
  struct Chunk {
    char* dst;
    const char* src;
    size_t bytes;
  };
  std::vector<Chunk> chunks;
  try {
    for (const CopyPiece& p : pieces)
      for (int64_t o = 0; o < p.bytes; o += kChunk)
        chunks.push_back({static_cast<char*>(p.dst) + o, static_cast<const char*>(p.src) + o,
                          static_cast<size_t>(std::min(kChunk, p.bytes - o))});
  } catch (...) {  // no memory for the list: one thread, piece by piece
    for (const CopyPiece& p : pieces) std::memcpy(p.dst, p.src, static_cast<size_t>(p.bytes));
    return;
  }
  const auto run = [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) std::memcpy(chunks[j].dst, chunks[j].src, chunks[j].bytes);
  };
  const int64_t n = static_cast<int64_t>(chunks.size());
  // parallel_ranges copes with threads or memory it cannot get (the caller copies that share);
  // run itself cannot throw.
  parallel_ranges(n, std::min(n, threads), run);
}

}  // namespace h3rt
