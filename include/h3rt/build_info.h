// What this build of h3rt holds: its version, the CUDA archs its kernels were compiled for and
// which optional GEMM paths it has. For `h3rt --version`, h3rt.build_info() and bug reports.
#pragma once

#include <string>

namespace h3rt {

struct BuildInfo {
  std::string version;          // the library's version ("0.1.0")
  bool cuda = false;            // the CUDA backend is compiled in
  std::string cuda_archs;       // the arch list its kernels target ("90a,121a"); empty without CUDA
  int cuda_build_version = 0;   // CUDA toolkit at build time (CUDART_VERSION: 13000 = 13.0)
  int cuda_driver_version = 0;  // the newest CUDA the installed driver runs (0: no driver)
  // The int8 W8A8 GEMMs kAuto runs (ops/int8_linear): CUTLASS 4.2 wgmma kernels on sm_90 and
  // CUTLASS mma.sync on sm_120/121, each where compiled in; cuBLASLt otherwise.
  bool cutlass_int8_sm90 = false;
  bool cutlass_int8_sm80 = false;
};

BuildInfo build_info();  // never throws; needs no GPU
// Two lines (no final newline): "h3rt 0.1.0" and the CUDA backend (archs, toolkit, driver, int8
// GEMM paths) or "CPU only".
std::string build_summary(const BuildInfo& info);

}  // namespace h3rt
