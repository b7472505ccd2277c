// `h3rt bench load`: a checkpoint's weights loaded into host memory as a backend loads them,
// timed, with the host memory it took. backend cpu: f32 copies of the float layers (what the
// CPU reference computes from); cuda: the stored bytes only (LoadOptions::dense_float_copies
// false), which the upload then reads. Every weight byte is read once after the load, as an
// upload would, so the mapped file's pages count. No GPU is used.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace h3rt::bench {

// JSON: checkpoint, file_bytes, backend, dense_float_copies, load_s, read_s, peak_heap_bytes
// (h3rt's tracked host allocations at their peak), peak_rss_bytes (the process's peak resident
// set: the heap and the file pages read, which the kernel may drop again), rss_before_bytes.
nlohmann::json run_load_bench(const std::string& checkpoint, const std::string& backend);

}  // namespace h3rt::bench
