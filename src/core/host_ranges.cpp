#include "core/host_ranges.h"

#include <algorithm>

#include "h3rt/check.h"

namespace h3rt {

std::vector<HostRange> page_ranges(std::vector<HostRange> pieces, uintptr_t page) {
  H3RT_CHECK(page > 0 && (page & (page - 1)) == 0, "page_ranges: page ", page,
             " is not a power of two");
  std::vector<HostRange> pages;
  for (const HostRange& p : pieces)
    if (p.end > p.begin) pages.push_back({p.begin & ~(page - 1), (p.end + page - 1) & ~(page - 1)});
  std::sort(pages.begin(), pages.end(),
            [](const HostRange& a, const HostRange& b) { return a.begin < b.begin; });
  std::vector<HostRange> out;
  for (const HostRange& p : pages) {
    if (!out.empty() && p.begin <= out.back().end)
      out.back().end = std::max(out.back().end, p.end);
    else
      out.push_back(p);
  }
  return out;
}

}  // namespace h3rt
