// The kernel timeline of the bench reports (bench/kernel_timeline.h) from given activity records.
#include <gtest/gtest.h>

#include "bench/kernel_timeline.h"

namespace h3rt {
namespace {

using bench::KernelSpan;

TEST(KernelTimeline, IdleIsTheSpanLessTheUnionOfTheIntervals) {
  // Out of order; b overlaps a and ends inside c's start gap; c starts 3 us after b ends; d
  // starts 1 us after c; a memset fills part of the c-d gap.
  const std::vector<KernelSpan> spans = {
      {20000, 30000, "c"},                // [20, 30] us
      {0, 10000, "a"},                    // [0, 10]
      {5000, 17000, "b"},                 // [5, 17]
      {31000, 40000, "d"},                // [31, 40]
      {30000, 30500, "[memset]", false},  // [30, 30.5]
  };
  const auto t = bench::kernel_timeline(spans);
  EXPECT_EQ(t.kernels, 4);
  EXPECT_EQ(t.copies, 1);
  EXPECT_DOUBLE_EQ(t.span_us, 40.0);
  EXPECT_DOUBLE_EQ(t.idle_us, 3.5);  // 17..20 and 30.5..31
  EXPECT_DOUBLE_EQ(t.busy_us, 36.5);
  ASSERT_EQ(t.largest.size(), 2u);
  EXPECT_EQ(t.largest[0].after, "b");
  EXPECT_EQ(t.largest[0].before, "c");
  EXPECT_DOUBLE_EQ(t.largest[0].us, 3.0);
  EXPECT_EQ(t.largest[1].after, "[memset]");
  EXPECT_EQ(t.largest[1].before, "d");
  EXPECT_DOUBLE_EQ(t.largest[1].us, 0.5);
}

TEST(KernelTimeline, AKernelInsideAnotherLeavesNoGap) {
  // b lies inside a; the gap before c is measured from a's end, not b's.
  const auto t = bench::kernel_timeline({{0, 10000, "a"}, {2000, 4000, "b"}, {12000, 13000, "c"}});
  EXPECT_DOUBLE_EQ(t.idle_us, 2.0);
  ASSERT_EQ(t.largest.size(), 1u);
  EXPECT_EQ(t.largest[0].after, "a");
}

TEST(KernelTimeline, KeepsTheLongestGapsAndReportsThem) {
  std::vector<KernelSpan> spans;
  for (int i = 0; i < 6; ++i)  // gaps of 1..5 us
    spans.push_back({static_cast<uint64_t>(i * 20000 + i * (i + 1) / 2 * 1000),
                     static_cast<uint64_t>(i * 20000 + i * (i + 1) / 2 * 1000 + 20000),
                     "k" + std::to_string(i)});
  const auto t = bench::kernel_timeline(spans, 2);
  EXPECT_DOUBLE_EQ(t.idle_us, 15.0);
  ASSERT_EQ(t.largest.size(), 2u);
  EXPECT_DOUBLE_EQ(t.largest[0].us, 5.0);
  EXPECT_EQ(t.largest[0].before, "k5");
  EXPECT_DOUBLE_EQ(t.largest[1].us, 4.0);
  const auto j = bench::kernel_timeline_json(t, "test");
  EXPECT_EQ(j.at("kernels").get<int64_t>(), 6);
  EXPECT_DOUBLE_EQ(j.at("idle_ms").get<double>(), 0.015);
  EXPECT_DOUBLE_EQ(j.at("idle_fraction").get<double>(), 15.0 / t.span_us);
  EXPECT_EQ(j.at("largest_gaps").size(), 2u);
  EXPECT_DOUBLE_EQ(j.at("largest_gaps")[0].at("microseconds").get<double>(), 5.0);
}

TEST(KernelTimeline, EmptyAndSingle) {
  const auto e = bench::kernel_timeline({});
  EXPECT_EQ(e.kernels, 0);
  EXPECT_DOUBLE_EQ(e.span_us, 0.0);
  EXPECT_DOUBLE_EQ(bench::kernel_timeline_json(e, "x").at("idle_fraction").get<double>(), 0.0);
  const auto one = bench::kernel_timeline({{100, 2100, "a"}});
  EXPECT_DOUBLE_EQ(one.span_us, 2.0);
  EXPECT_DOUBLE_EQ(one.idle_us, 0.0);
  EXPECT_TRUE(one.largest.empty());
}

TEST(KernelTimeline, ShortNamesDemangleAndDropTemplatesParametersAndReturnType) {
  // void h3rt::ops::sage_kernel<3>(h3rt::ops::Params)
  EXPECT_EQ(bench::short_kernel_name("_ZN4h3rt3ops11sage_kernelILi3EEEvNS0_6ParamsE"),
            "ops::sage_kernel");
  // fill(float*, int)
  EXPECT_EQ(bench::short_kernel_name("_Z4fillPfi"), "fill");
  // void h3rt::ops::(anonymous namespace)::rmsnorm_modulate_kernel(float*)
  EXPECT_EQ(bench::short_kernel_name("_ZN4h3rt3ops12_GLOBAL__N_123rmsnorm_modulate_kernelEPf"),
            "ops::rmsnorm_modulate_kernel");
  // Not demangled (a truncated template argument list): the nested name's leading components.
  EXPECT_EQ(bench::short_kernel_name("_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniv"),
            "cutlass::device_kernel");
  EXPECT_EQ(bench::short_kernel_name("not_mangled"), "not_mangled");
  EXPECT_EQ(bench::short_kernel_name("[memcpy]"), "[memcpy]");
}

}  // namespace
}  // namespace h3rt
