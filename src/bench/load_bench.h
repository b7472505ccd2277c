// `h3rt bench load`: a checkpoint's weights loaded into host memory as a backend loads them,
// timed, with the host memory it took. backend cpu: f32 copies of the float layers (what the
// CPU reference computes from); cuda: the stored bytes only (LoadOptions::dense_float_copies
// false), which the upload then reads. Every weight byte is read once after the load, as an
// upload would, so the mapped file's pages count. No GPU is used.
// gather: also what weight streaming's file source does per block, timed over every layer's
// stored bytes: parallel_copy (8 threads) into a staging buffer, once from disk (the file's
// cached pages dropped first, posix_fadvise; backend cuda only: the cpu backend's f32 copies have
// read the file already) and once more from the page cache.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace h3rt::bench {

// JSON: checkpoint, file_bytes, backend, dense_float_copies, load_s, read_s, peak_heap_bytes
// (h3rt's tracked host allocations at their peak), peak_rss_bytes (the process's peak resident
// set: the heap and the file pages read, which the kernel may drop again), rss_before_bytes;
// with gather: gather_bytes, gather_cold_s / _gbps (null for cpu), gather_warm_s / _gbps.
nlohmann::json run_load_bench(const std::string& checkpoint, const std::string& backend,
                              bool gather = false);

}  // namespace h3rt::bench
