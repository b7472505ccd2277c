// Helpers shared by the tests: where the reference data lives, and error measures.
#pragma once

#include <cstdlib>
#include <string>

namespace h3rt::test {

// The shared reference folder (golden/...). H3RT_SHARED_DIR in the environment overrides the
// build-time default, so a copied tree can point elsewhere.
inline std::string shared_dir() {
  if (const char* env = std::getenv("H3RT_SHARED_DIR")) return env;
  return H3RT_SHARED_DIR;
}

inline std::string golden_dir() { return shared_dir() + "/golden/h3_tiny"; }
inline std::string nvfp4_golden_dir() { return shared_dir() + "/golden/nvfp4"; }

}  // namespace h3rt::test
