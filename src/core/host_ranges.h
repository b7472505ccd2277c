// Host address ranges rounded out to whole pages and merged, for calls that work on pages
// (cudaHostRegister: a page registered twice is an error, and tensors packed in one mapped file
// share the pages at their edges).
#pragma once

#include <cstdint>
#include <vector>

namespace h3rt {

struct HostRange {
  uintptr_t begin = 0, end = 0;  // [begin, end)
};

// The pages `pieces` touch, as the fewest disjoint ranges (ascending; ranges that overlap or
// touch after rounding become one). Empty pieces are left out. `page` is a power of two.
std::vector<HostRange> page_ranges(std::vector<HostRange> pieces, uintptr_t page);

}  // namespace h3rt
