// The GPU a benchmark ran on, as every report names it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace h3rt::bench {

struct DeviceInfo {
  std::string name, compute_capability;  // e.g. "NVIDIA H200", "90"
  int driver_version = 0, runtime_version = 0;
  std::string pci_bus_id;  // e.g. "0000:19:00.0" (telemetry finds the NVML device by it)
};

// Sets device, compute_capability, driver_version and cuda_runtime_version in a report.
void add_device_fields(nlohmann::json& report, const DeviceInfo& d);

#ifdef H3RT_HAVE_CUDA
DeviceInfo current_device_info();  // the current CUDA device
#endif

}  // namespace h3rt::bench
