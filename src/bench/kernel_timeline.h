// Where the GPU sat idle between the kernels of one piece of work (CUPTI activity records of its
// kernels, memsets and memcpys, launch_count.h): the time from the first one's start to the last
// one's end, less the union of their intervals. That idle time bounds what overlapping one kernel's
// launch with the previous one's tail (programmatic dependent launch) could take back. CPU code:
// tested in CI.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace h3rt::bench {

// A kernel, or a memset or memcpy (name "[memset]" / "[memcpy]", kernel false): device work
// that is not idle time.
struct KernelSpan {
  uint64_t start_ns = 0, end_ns = 0;  // GPU timestamps
  std::string name;                   // as CUPTI gives it (mangled)
  bool kernel = true;
};

struct KernelGap {
  std::string after, before;  // short names of the kernels on either side
  double us = 0;
};

struct KernelTimeline {
  int64_t kernels = 0, copies = 0;  // copies: memsets and memcpys
  double span_us = 0, busy_us = 0, idle_us = 0;
  std::vector<KernelGap> largest;  // the longest gaps, longest first
  double idle_fraction() const { return span_us > 0 ? idle_us / span_us : 0.0; }
};

// The timeline of `spans` (any order; overlapping kernels count once), keeping `keep` gaps.
KernelTimeline kernel_timeline(std::vector<KernelSpan> spans, size_t keep = 3);

// A kernel's name for a report: demangled, without template arguments, parameters or return
// type, and at most its last two scope components ("ops::sage_kernel"). Other names (not "_Z...",
// or not demangling) are returned as given.
std::string short_kernel_name(const std::string& mangled);

// {"source", "kernels", "memsets_and_memcpys", "span_ms", "busy_ms", "idle_ms", "idle_fraction",
// "largest_gaps"}.
nlohmann::json kernel_timeline_json(const KernelTimeline& t, const std::string& source);

}  // namespace h3rt::bench
