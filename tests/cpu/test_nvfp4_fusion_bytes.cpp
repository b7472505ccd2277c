// Byte model of the fused NVFP4 producers at the seed shape.
#include <gtest/gtest.h>

#include "bench/nvfp4_fusion_bytes.h"

namespace h3rt::bench {
namespace {

TEST(Nvfp4FusionBytes, SeedShapePerBoundary) {
  const Nvfp4FusionBytes r = nvfp4_fusion_bytes();
  ASSERT_EQ(r.boundaries.size(), 4u);
  const int64_t s = 37810, h = 5376, inner = 56 * 128, f = 14336;
  // norm1 -> qkv: 2N written + 2N read saved with a given g; computed g: 2N + 4N - 2N (x again).
  const auto& n1 = r.boundaries[0];
  EXPECT_EQ(n1.cols, h);
  EXPECT_EQ(n1.saved_given, 4 * s * h);
  EXPECT_EQ(n1.saved_given, 813066240);  // 4 * 37,810 * 5,376
  EXPECT_EQ(n1.saved_computed, 4 * s * h);
  EXPECT_EQ(r.boundaries[1].saved_given, 4 * s * h);
  EXPECT_EQ(r.boundaries[1].saved_computed, 4 * s * h);
  // attention -> out_proj: given g only; computed g stays unfused.
  const auto& at = r.boundaries[2];
  EXPECT_EQ(at.cols, inner);
  EXPECT_EQ(at.saved_given, 4 * s * inner);
  EXPECT_FALSE(at.computed_fused);
  EXPECT_EQ(at.saved_computed, 0);
  // swiglu -> fc2: computed g re-reads the [S, 2F] fc1 output (4N): saves 2N.
  const auto& sw = r.boundaries[3];
  EXPECT_EQ(sw.cols, f);
  EXPECT_EQ(sw.producer_reread, 4 * s * f);
  EXPECT_EQ(sw.saved_given, 4 * s * f);
  EXPECT_EQ(sw.saved_computed, 2 * s * f);
  EXPECT_EQ(r.saved_given, 4 * s * (2 * h + inner + f));
  EXPECT_EQ(r.saved_computed, 4 * s * 2 * h + 2 * s * f);
}

TEST(Nvfp4FusionBytes, ScalesWithRowsAndRejectsBadShape) {
  Nvfp4FusionShape a, b;
  b.rows = 2 * a.rows;
  EXPECT_EQ(nvfp4_fusion_bytes(b).saved_given, 2 * nvfp4_fusion_bytes(a).saved_given);
  Nvfp4FusionShape bad;
  bad.ffn = 0;
  EXPECT_THROW(nvfp4_fusion_bytes(bad), std::exception);
}

}  // namespace
}  // namespace h3rt::bench
