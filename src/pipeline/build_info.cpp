// build_info(): what the build compiled in (H3RT_VERSION_STRING and H3RT_CUDA_ARCH_LIST come
// from CMake; the int8 GEMM paths from their own TUs) and the driver's CUDA version.
#include "h3rt/build_info.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/cuda_text.h"

#ifdef H3RT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "ops/int8_linear/int8_linear_paths.h"
#endif

namespace h3rt {
namespace {

// "90a,121a" -> "sm_90a, sm_121a"
std::string arch_words(const std::string& list) {
  std::string out;
  for (const std::string& arch : split_arch_list(list))
    out += (out.empty() ? "sm_" : ", sm_") + arch;
  return out;
}

// Whether the arch list ("90a,121a") has an arch of major version `major` (9 -> "90a").
bool has_major(const std::string& list, int major) {
  const auto archs = split_arch_list(list);
  return std::any_of(archs.begin(), archs.end(), [&](const std::string& a) {
    return std::strtol(a.c_str(), nullptr, 10) / 10 == major;  // "121a" -> 121; never throws
  });
}

}  // namespace

BuildInfo build_info() {
  BuildInfo b;
  b.version = H3RT_VERSION_STRING;
#ifdef H3RT_HAVE_CUDA
  b.cuda = true;
  b.cuda_archs = H3RT_CUDA_ARCH_LIST;
  b.cuda_build_version = CUDART_VERSION;
  if (cudaDriverGetVersion(&b.cuda_driver_version) != cudaSuccess) b.cuda_driver_version = 0;
  b.cutlass_int8_sm90 = ops::int8_detail::cutlass_sm90_compiled();
  b.cutlass_int8_sm80 = ops::int8_detail::cutlass_sm80_compiled();
#endif
  return b;
}

std::string build_summary(const BuildInfo& b) {
  std::string s = "h3rt " + b.version + "\n";
  if (!b.cuda) return s + "CUDA backend: not built (CPU only)";
  s += "CUDA backend: kernels for " + arch_words(b.cuda_archs) + ", built with CUDA " +
       cuda_version_text(b.cuda_build_version) + "; ";
  s += b.cuda_driver_version > 0
           ? "the driver runs CUDA " + cuda_version_text(b.cuda_driver_version)
           : "no CUDA driver found";
  // The int8 GEMM path of each arch family the build has kernels for, and only those.
  const auto gemm = [](bool cutlass) { return std::string(cutlass ? "CUTLASS" : "cuBLASLt"); };
  std::string paths;
  const auto add = [&](int major, const std::string& path, const char* family) {
    if (has_major(b.cuda_archs, major))
      paths += (paths.empty() ? "" : ", ") + path + " on " + family;
  };
  add(9, gemm(b.cutlass_int8_sm90), "sm_90");
  add(10, "cuBLASLt", "sm_10x");
  add(12, gemm(b.cutlass_int8_sm80), "sm_12x");
  if (!paths.empty()) s += "; int8 GEMMs: " + paths;
  return s;
}

}  // namespace h3rt
