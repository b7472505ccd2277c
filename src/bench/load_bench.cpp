// `h3rt bench load` (load_bench.h).
#include "bench/load_bench.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "core/parallel.h"
#include "h3rt/check.h"
#include "h3rt/lora.h"
#include "h3rt/memory.h"
#include "h3rt/model.h"

namespace h3rt::bench {
namespace {

int64_t peak_rss_bytes() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return static_cast<int64_t>(r.ru_maxrss) * 1024;  // Linux: kilobytes
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Every layer's stored weight and scale bytes on the host.
std::vector<const Tensor*> stored_tensors(H3Model& m) {
  std::vector<const Tensor*> v;
  for (const auto& [name, l] : linear_layers(m.weights))
    for (const Tensor* t : {&l->data, &l->scale})
      if (t->data() && t->device() == Device::cpu && t->nbytes() > 0) v.push_back(t);
  return v;
}

// Seconds to copy every tensor into a staging buffer as the file source's gather does.
double gather_seconds(const std::vector<const Tensor*>& tensors, std::vector<char>& staging) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const Tensor* t : tensors) parallel_copy({{staging.data(), t->data(), t->nbytes()}});
  return seconds_since(t0);
}

// Asks the kernel to drop the file's cached pages (those no process maps).
void drop_cached_pages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

nlohmann::json gather_report(const std::vector<const Tensor*>& tensors, const std::string& path,
                             bool cold) {
  int64_t bytes = 0, largest = 0;
  for (const Tensor* t : tensors) {
    bytes += t->nbytes();
    largest = std::max(largest, t->nbytes());
  }
  std::vector<char> staging(static_cast<size_t>(largest));
  nlohmann::json j = {{"gather_bytes", bytes}, {"gather_threads", 8}};
  j["gather_cold_s"] = j["gather_cold_gbps"] = nullptr;
  if (cold) {
    drop_cached_pages(path);
    const double s = gather_seconds(tensors, staging);
    j["gather_cold_s"] = s;
    j["gather_cold_gbps"] = bytes / s / 1e9;
  }
  const double s = gather_seconds(tensors, staging);
  j["gather_warm_s"] = s;
  j["gather_warm_gbps"] = bytes / s / 1e9;
  return j;
}

// Reads one byte per page of every stored tensor as an upload's copy would.
uint64_t read_weights(const std::vector<const Tensor*>& tensors) {
  uint64_t sum = 0;
  for (const Tensor* t : tensors) {
    const auto* p = static_cast<const unsigned char*>(t->data());
    for (int64_t i = 0; i < t->nbytes(); i += 4096) sum += p[i];
  }
  return sum;
}

}  // namespace

nlohmann::json run_load_bench(const std::string& checkpoint, const std::string& backend,
                              bool gather) {
  H3RT_CHECK(backend == "cpu" || backend == "cuda", "--backend must be cpu or cuda, got '", backend,
             "'");
  const int64_t rss_before = peak_rss_bytes();
  reset_host_peak();
  LoadOptions o;
  o.dense_float_copies = backend == "cpu";
  const auto t0 = std::chrono::steady_clock::now();
  H3Model m = load_model(checkpoint, o);
  const double load_s = seconds_since(t0);
  const std::vector<const Tensor*> tensors = stored_tensors(m);
  nlohmann::json g;
  if (gather) g = gather_report(tensors, checkpoint, backend == "cuda");
  const auto t1 = std::chrono::steady_clock::now();
  const uint64_t sum = read_weights(tensors);
  const double read_s = seconds_since(t1);
  nlohmann::json r = {{"checkpoint", checkpoint},
                      {"file_bytes", static_cast<int64_t>(std::filesystem::file_size(checkpoint))},
                      {"backend", backend},
                      {"dense_float_copies", o.dense_float_copies},
                      {"load_s", load_s},
                      {"read_s", read_s},
                      {"peak_heap_bytes", host_memory_stats().peak_bytes},
                      {"peak_rss_bytes", peak_rss_bytes()},
                      {"rss_before_bytes", rss_before},
                      {"read_checksum", sum}};
  if (gather) r.update(g);
  return r;
}

}  // namespace h3rt::bench
