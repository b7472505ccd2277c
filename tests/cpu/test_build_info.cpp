// `h3rt --version` and build_info(): the version, and the CUDA backend as the build made it.
#include <gtest/gtest.h>

#include <string>

#include "h3rt/build_info.h"
#include "test_util.h"

namespace h3rt {
namespace {

TEST(BuildInfo, NamesTheVersionAndTheBackendAsBuilt) {
  const BuildInfo b = build_info();
  EXPECT_FALSE(b.version.empty());
  const std::string s = build_summary(b);
  EXPECT_EQ(s.rfind("h3rt " + b.version + "\n", 0), 0u) << s;
#ifdef H3RT_HAVE_CUDA
  EXPECT_TRUE(b.cuda);
  EXPECT_EQ(b.cuda_archs, H3RT_CUDA_ARCH_LIST);
  EXPECT_GE(b.cuda_build_version, 11000);
  EXPECT_NE(s.find("built with CUDA " + std::to_string(b.cuda_build_version / 1000) + "."),
            std::string::npos)
      << s;
  // Every arch of the list, as sm_<arch>.
  std::string arch;
  for (char c : std::string(H3RT_CUDA_ARCH_LIST) + ",") {
    if (c != ',') {
      arch += c;
      continue;
    }
    EXPECT_NE(s.find("sm_" + arch), std::string::npos) << arch << ": " << s;
    arch.clear();
  }
#else
  EXPECT_FALSE(b.cuda);
  EXPECT_NE(s.find("CPU only"), std::string::npos) << s;
#endif
}

// The summary's words follow the fields, not the machine it runs on.
TEST(BuildInfo, SummaryFollowsTheFields) {
  BuildInfo b;
  b.version = "9.8.7";
  EXPECT_EQ(build_summary(b), "h3rt 9.8.7\nCUDA backend: not built (CPU only)");
  b.cuda = true, b.cuda_archs = "90a,121a", b.cuda_build_version = 13000;
  b.cutlass_int8_sm80 = true;
  EXPECT_EQ(build_summary(b),
            "h3rt 9.8.7\nCUDA backend: kernels for sm_90a, sm_121a, built with CUDA 13.0; no CUDA "
            "driver found; int8 GEMMs: cuBLASLt on sm_90, CUTLASS on sm_12x");
  b.cuda_driver_version = 12080, b.cutlass_int8_sm90 = true;
  EXPECT_NE(build_summary(b).find("the driver runs CUDA 12.8; int8 GEMMs: CUTLASS on sm_90"),
            std::string::npos);
  // Only the arch families the build has kernels for are named.
  b.cuda_archs = "90a";
  EXPECT_EQ(build_summary(b).substr(build_summary(b).find("; int8")),
            "; int8 GEMMs: CUTLASS on sm_90");
  b.cuda_archs = "100a,121a";
  EXPECT_EQ(build_summary(b).substr(build_summary(b).find("; int8")),
            "; int8 GEMMs: cuBLASLt on sm_10x, CUTLASS on sm_12x");
  b.cuda_archs = "90a,100a,120a,121a";
  EXPECT_EQ(build_summary(b).substr(build_summary(b).find("; int8")),
            "; int8 GEMMs: CUTLASS on sm_90, cuBLASLt on sm_10x, CUTLASS on sm_12x");
}

TEST(BuildInfo, CliVersionPrintsTheSummary) {
  test::CliRun r = test::run_cli("--version");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, build_summary(build_info()) + "\n");
}

}  // namespace
}  // namespace h3rt
