// `h3rt selftest` on this GPU (h3rt/selftest.h): every case that applies passes on fresh data,
// the Sage cases run the kernel the device dispatches, and a fixed seed repeats the figures.
#include <gtest/gtest.h>

#include <cstdio>

#include "cuda_test_util.h"
#include "h3rt/selftest.h"

namespace h3rt {
namespace {

TEST(SelftestCuda, PassesOnThisGpu) {
  H3RT_REQUIRE_GPU();
  SelftestOptions o;
  std::vector<std::string> started;
  o.progress = [&](const std::string& name) { started.push_back(name); };
  const SelftestReport r = selftest(o);
  std::fputs(format_selftest(r).c_str(), stdout);
  EXPECT_TRUE(r.passed());
  EXPECT_NE(r.seed, 0u);
  ASSERT_EQ(r.cases.size(), 10u);
  int ran = 0;
  for (const auto& c : r.cases) {
    EXPECT_TRUE(c.skipped || c.passed) << c.name << ": " << c.detail;
    ran += !c.skipped;
  }
  EXPECT_EQ(started.size(), static_cast<size_t>(ran));
  EXPECT_EQ(r.suite_ran_here, r.cc == 90);
  if (r.cc == 90) {
    EXPECT_EQ(ran, 10);
    EXPECT_NE(r.cases[0].detail.find("wgmma_pp3"), std::string::npos) << r.cases[0].detail;
  }
}

TEST(SelftestCuda, SeedRepeatsTheFigures) {
  H3RT_REQUIRE_GPU();
  SelftestOptions o;
  o.seed = 20261207;
  const SelftestReport a = selftest(o), b = selftest(o);
  ASSERT_EQ(a.cases.size(), b.cases.size());
  for (size_t i = 0; i < a.cases.size(); ++i) EXPECT_EQ(a.cases[i].detail, b.cases[i].detail);
}

}  // namespace
}  // namespace h3rt
