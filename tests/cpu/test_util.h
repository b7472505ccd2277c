// Helpers shared by the tests: where the reference data lives, and error measures.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace h3rt::test {

// The shared reference folder (golden/...). H3RT_SHARED_DIR in the environment overrides the
// build-time default, so a copied tree can point elsewhere.
inline std::string shared_dir() {
  if (const char* env = std::getenv("H3RT_SHARED_DIR")) return env;
  return H3RT_SHARED_DIR;
}

inline std::string golden_dir() {
  return shared_dir() + "/golden/h3_tiny";
}
inline std::string nvfp4_golden_dir() {
  return shared_dir() + "/golden/nvfp4";
}

inline uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// Element-wise float32 bit equality, reporting the first few differences with their bits.
template <typename A, typename B>
void expect_same_bits(const A& got, const B& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (bits(got[i]) != bits(want[i]) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " (0x" << std::hex << bits(got[i])
                    << "), want " << want[i] << " (0x" << bits(want[i]) << std::dec << ")";
  EXPECT_EQ(bad, 0) << what << ": elements differing in bits";
}

}  // namespace h3rt::test
