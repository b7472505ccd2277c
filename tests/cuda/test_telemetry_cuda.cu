// NVML telemetry on a GPU (src/bench/telemetry.h): while a kernel keeps the GPU busy, the sampler
// reads plausible values (SM clock > 0, power > 0) for this device, and the energy counter never
// goes back and grows over the busy time. No timing thresholds.
#include <gtest/gtest.h>

#include <vector>

#include "bench/device_info.h"
#include "bench/telemetry.h"
#include "cuda_test_util.h"

namespace h3rt {
namespace {

// Spins for about `cycles` SM clock cycles per thread.
__global__ void spin(long long cycles, int* out) {
  const long long t0 = clock64();
  int x = threadIdx.x;
  while (clock64() - t0 < cycles) x = x * 1664525 + 1013904223;
  if (x == 42) *out = x;  // keeps the loop
}

TEST(TelemetryCuda, SamplerReadsPlausibleValues) {
  H3RT_REQUIRE_GPU();
  const bench::DeviceInfo dev = bench::current_device_info();
  bench::TelemetrySampler sampler(bench::make_nvml_telemetry(dev.pci_bus_id), 5.0);
  ASSERT_TRUE(sampler.available()) << "NVML should work where a CUDA device does: "
                                   << sampler.header_json().dump();
  int* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, sizeof(int)), cudaSuccess);
  std::vector<double> energy = {*sampler.energy_mj()};
  sampler.start();
  for (int i = 0; i < 4; ++i) {  // 4 x ~2e8 cycles: ~0.1 s each at 1.5-2 GHz
    spin<<<1024, 128>>>(200'000'000LL, out);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto e = sampler.energy_mj();
    ASSERT_TRUE(e.has_value());
    energy.push_back(*e);
  }
  sampler.stop();
  cudaFree(out);

  const auto samples = sampler.samples();
  ASSERT_FALSE(samples.empty());
  for (const auto& s : samples) {
    EXPECT_GT(s.sm_clock_mhz, 0);
    EXPECT_LT(s.sm_clock_mhz, 5000);
    EXPECT_GT(s.power_w, 0);
    EXPECT_LT(s.power_w, 5000);
  }
  for (size_t i = 1; i < energy.size(); ++i) EXPECT_GE(energy[i], energy[i - 1]) << i;
  EXPECT_GT(energy.back(), energy.front());
  const bench::PowerSummary p = bench::summarize(samples, {{samples.front().t_ms,
                                                            samples.back().t_ms}});
  EXPECT_EQ(p.samples, static_cast<int>(samples.size()));
  std::printf("[ telemetry ] %d samples: SM clock median %.0f MHz (min %.0f), mean %.1f W, "
              "%.1f J over the busy time; %s\n",
              p.samples, p.sm_clock_mhz_median, p.sm_clock_mhz_min, p.power_w_mean,
              (energy.back() - energy.front()) / 1e3, sampler.header_json().dump().c_str());
}

}  // namespace
}  // namespace h3rt
