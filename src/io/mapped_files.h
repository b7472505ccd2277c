// Whether memory belongs to a checkpoint file h3rt has mapped (SafetensorsFile::open): such
// pages are the kernel's page cache, dropped under memory pressure and read again on use, so
// keeping a view of them costs no host memory (weight streaming's file source).
#pragma once

#include <cstdint>

namespace h3rt {

// [p, p + bytes) lies inside one live mapping.
bool is_mapped_file_memory(const void* p, int64_t bytes);

}  // namespace h3rt
