// Helpers shared by the tests: where the reference data lives, and error measures.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "h3rt/check.h"

namespace h3rt::test {

// The message of the h3rt::Error f throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Relative L2 error of a against the reference b: sqrt(sum (a - b)^2 / sum b^2), in double.
template <typename A, typename B>
double rel_l2(const A& a, const B& b) {
  double n = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    n += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    d += double(b[i]) * double(b[i]);
  }
  return std::sqrt(n / d);
}

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

// A fresh folder under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "h3rt_test") {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

#ifdef H3RT_CLI_PATH
struct CliRun {
  int status;
  std::string output;  // stdout, and stderr unless dropped
};

// Runs the h3rt binary with `args`; with_stderr = false drops stderr (to parse stdout alone).
inline CliRun run_cli(const std::string& args, bool with_stderr = true) {
  const std::string cmd =
      std::string(H3RT_CLI_PATH) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  CliRun r{-1, ""};
  if (!p) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}
#endif

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
