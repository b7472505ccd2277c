#include "h3rt/memory.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace h3rt {
namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};

void raise_peak(int64_t now) {
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

std::vector<std::string>& scopes() {
  thread_local std::vector<std::string> s;
  return s;
}

[[noreturn]] void host_out_of_memory(size_t bytes) {
  const std::string what = memory_scope();
  throw OutOfMemory(detail::concat(
      "out of host memory allocating ", format_bytes(static_cast<int64_t>(bytes)),
      what.empty() ? "" : " for " + what, " (tracked host buffers in use ",
      format_bytes(g_current.load()), ", peak ", format_bytes(g_peak.load()),
      "); the CPU reference holds every weight in float32: a smaller request (--frames, --width, "
      "--height) or the GPU (--device cuda) needs less"));
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
  if (bytes > (size_t(1) << 62)) host_out_of_memory(bytes);
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) host_out_of_memory(bytes);
  raise_peak(g_current.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes));
  return p;
}

void host_free(void* p, size_t bytes) noexcept {
  if (!p) return;
  std::free(p);
  g_current.fetch_sub(static_cast<int64_t>(bytes));
}

MemoryScope::MemoryScope(std::string what) {
  scopes().push_back(std::move(what));
}

MemoryScope::~MemoryScope() {
  scopes().pop_back();
}

std::string memory_scope() {
  std::string s;
  for (const std::string& w : scopes()) s += (s.empty() ? "" : " / ") + w;
  return s;
}

std::string format_bytes(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

}  // namespace h3rt
