// `h3rt bench load` (load_bench.h).
#include "bench/load_bench.h"

#include <sys/resource.h>

#include <chrono>
#include <filesystem>

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

// Reads one byte per page of every weight (and block scale) as an upload's copy would.
uint64_t read_weights(H3Model& m) {
  uint64_t sum = 0;
  for (const auto& [name, l] : linear_layers(m.weights))
    for (const Tensor* t : {&l->data, &l->scale}) {
      if (!t->data() || t->device() != Device::cpu) continue;
      const auto* p = static_cast<const unsigned char*>(t->data());
      for (int64_t i = 0; i < t->nbytes(); i += 4096) sum += p[i];
    }
  return sum;
}

}  // namespace

nlohmann::json run_load_bench(const std::string& checkpoint, const std::string& backend) {
  H3RT_CHECK(backend == "cpu" || backend == "cuda", "--backend must be cpu or cuda, got '",
             backend, "'");
  const int64_t rss_before = peak_rss_bytes();
  reset_host_peak();
  LoadOptions o;
  o.dense_float_copies = backend == "cpu";
  const auto t0 = std::chrono::steady_clock::now();
  H3Model m = load_model(checkpoint, o);
  const double load_s = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  const uint64_t sum = read_weights(m);
  const double read_s = seconds_since(t1);
  return {{"checkpoint", checkpoint},
          {"file_bytes", static_cast<int64_t>(std::filesystem::file_size(checkpoint))},
          {"backend", backend},
          {"dense_float_copies", o.dense_float_copies},
          {"load_s", load_s},
          {"read_s", read_s},
          {"peak_heap_bytes", host_memory_stats().peak_bytes},
          {"peak_rss_bytes", peak_rss_bytes()},
          {"rss_before_bytes", rss_before},
          {"read_checksum", sum}};
}

}  // namespace h3rt::bench
