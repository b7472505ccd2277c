#include "h3rt/memory.h"

#include <atomic>
#include <cstdlib>

#include "h3rt/check.h"

namespace h3rt {
namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};

void raise_peak(int64_t now) {
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

}  // namespace

MemoryStats host_memory_stats() {
  return {g_current.load(), g_peak.load()};
}

void reset_host_peak() {
  g_peak.store(g_current.load());
}

void* host_alloc(size_t bytes) {
  // 64-byte alignment keeps vector loads and safetensors-style layouts happy.
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) throw std::bad_alloc();
  raise_peak(g_current.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes));
  return p;
}

void host_free(void* p, size_t bytes) noexcept {
  if (!p) return;
  std::free(p);
  g_current.fetch_sub(static_cast<int64_t>(bytes));
}

}  // namespace h3rt
