// Text forms of CUDA build facts shared by the runtime's messages (cuda/runtime.cu) and
// build_info(), which also compiles without CUDA: header-only, no CUDA headers.
#pragma once

#include <string>
#include <vector>

namespace h3rt {

// A CUDA version as cudaRuntimeGetVersion / cudaDriverGetVersion give it: 13000 -> "13.0".
inline std::string cuda_version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

// An arch list as CMake's H3RT_CUDA_ARCH_LIST or CMAKE_CUDA_ARCHITECTURES writes it ("90a,121a",
// "80;90a") -> its non-empty entries ({"90a", "121a"}).
inline std::vector<std::string> split_arch_list(const std::string& list) {
  std::vector<std::string> archs;
  std::string arch;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] != ',' && list[i] != ';') {
      arch += list[i];
      continue;
    }
    if (!arch.empty()) archs.push_back(arch);
    arch.clear();
  }
  return archs;
}

}  // namespace h3rt
