#include "bench/device_info.h"

namespace h3rt::bench {

void add_device_fields(nlohmann::json& report, const DeviceInfo& d) {
  report["device"] = d.name;
  report["compute_capability"] = d.compute_capability;
  report["driver_version"] = d.driver_version;
  report["cuda_runtime_version"] = d.runtime_version;
}

}  // namespace h3rt::bench
