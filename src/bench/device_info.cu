#include "bench/device_info.h"
#include "cuda/runtime.h"

namespace h3rt::bench {

DeviceInfo current_device_info() {
  cudaDeviceProp prop{};
  int dev = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  H3RT_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  DeviceInfo d;
  d.name = prop.name;
  d.compute_capability = std::to_string(prop.major) + std::to_string(prop.minor);
  cudaDriverGetVersion(&d.driver_version);
  cudaRuntimeGetVersion(&d.runtime_version);
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, dev) == cudaSuccess) d.pci_bus_id = bus;
  return d;
}

}  // namespace h3rt::bench
