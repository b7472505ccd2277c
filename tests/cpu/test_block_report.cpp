// The bench block report's schema and arithmetic, from given measurements (no GPU needed).
#include <gtest/gtest.h>

#include "bench/block_report.h"

namespace h3rt {
namespace {

TEST(BlockReport, SeedShapedSchemaWithRooflinesAndRatios) {
  const H3Config c = H3Config::h3();
  const SequenceLayout layout = make_t2va_layout(100, 207, 37, 48, 84);
  ASSERT_EQ(layout.seq_len(), 37810);
  bench::BlockMeasurements m;
  double ms = 1.0;
  for (const auto& name : bench::block_components()) m.component_ms[name] = {ms, ms + 2, ms + 1};
  m.component_ms["attention"] = {100.0};
  m.instrumented_ms = {120.0, 130.0, 110.0};
  m.uninstrumented_ms = {118.0};
  m.graph_ms = {117.0};
  m.launcher_calls = 10;
  const nlohmann::json r = bench::block_report(c, layout, m);

  const auto& p50 = r.at("representative_block_p50_milliseconds");
  for (const auto& name : bench::block_components()) EXPECT_TRUE(p50.contains(name)) << name;
  EXPECT_DOUBLE_EQ(p50.at("swiglu").get<double>(), 2.0);  // median of {1, 3, 2}
  EXPECT_DOUBLE_EQ(p50.at("module_forward").get<double>(), 120.0);
  EXPECT_DOUBLE_EQ(r.at("attention_milliseconds").get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(r.at("gemm_milliseconds").get<double>(), 8.0);           // 4 GEMMs x 2 ms
  EXPECT_DOUBLE_EQ(r.at("memory_bound_milliseconds").get<double>(), 10.0);  // 5 kernels x 2 ms
  EXPECT_DOUBLE_EQ(r.at("block_over_gemm_plus_attention").get<double>(), 118.0 / 108.0);
  EXPECT_EQ(r.at("workload").at("packed_tokens").get<int64_t>(), 37810);
  EXPECT_EQ(r.at("launches_per_block").at("launcher_calls").get<int>(), 10);

  // swiglu reads [S, 2F] and writes [S, F] in bf16.
  const double swiglu_bytes = 3.0 * 37810 * 14336 * 2;
  EXPECT_DOUBLE_EQ(r.at("bytes_moved_model").at("swiglu").get<double>(), swiglu_bytes);
  const auto& roof = r.at("roofline").at("swiglu");
  EXPECT_DOUBLE_EQ(roof.at("gb10_273GBps_ms").get<double>(), swiglu_bytes / 273e6);
  EXPECT_DOUBLE_EQ(roof.at("h200_hbm_4.8TBps_ms").get<double>(), swiglu_bytes / 4.8e9);
  EXPECT_DOUBLE_EQ(roof.at("achieved_GBps").get<double>(), swiglu_bytes / 2e6);
  EXPECT_TRUE(r.at("roofline").at("qkv_projection").contains("achieved_TFLOPs"));
  EXPECT_FALSE(r.contains("kernel_timeline"));  // not recorded (no CUPTI)

  m.timeline = bench::kernel_timeline({{0, 5000, "a"}, {7000, 9000, "b"}});
  const nlohmann::json t = bench::block_report(c, layout, m).at("kernel_timeline");
  EXPECT_EQ(t.at("kernels").get<int64_t>(), 2);
  EXPECT_DOUBLE_EQ(t.at("idle_ms").get<double>(), 0.002);
  EXPECT_DOUBLE_EQ(t.at("span_ms").get<double>(), 0.009);
}

// The workload names the GEMM and attention paths that ran.
TEST(BlockReport, NamesTheGemmAndAttentionPaths) {
  const SequenceLayout layout = make_t2va_layout(10, 9, 7, 8, 12);
  auto workload = [&](const bench::BlockMeasurements& m) {
    return bench::block_report(H3Config::tiny(), layout, m).at("workload");
  };
  bench::BlockMeasurements m;
  EXPECT_EQ(workload(m).at("gemm").get<std::string>(), "cuBLASLt bf16");
  EXPECT_EQ(workload(m).at("attention").get<std::string>(), "flash_bf16 (h3rt)");
  m.fp8 = true;
  EXPECT_NE(workload(m).at("gemm").get<std::string>().find("fp8"), std::string::npos);
  m.fp8 = false;
  m.nvfp4 = true;
  m.nvfp4_algo = "dequantize to bf16 scratch + cuBLASLt bf16";
  const std::string computed = workload(m).at("gemm").get<std::string>();
  EXPECT_NE(computed.find(m.nvfp4_algo), std::string::npos);
  EXPECT_NE(computed.find("computed input scales"), std::string::npos);
  m.nvfp4_static_input_scale = true;
  EXPECT_NE(workload(m).at("gemm").get<std::string>().find("fused"), std::string::npos);
  m.sage_attention = true;
  EXPECT_EQ(workload(m).at("attention").get<std::string>().rfind("sage_8bit", 0), 0u);
  // int8: each projection's format names the GEMM it ran, fused input or not.
  m.nvfp4 = false;
  m.int8_group = 256;
  m.fused_inputs = {"qkv"};
  m.int8_gemm = {{"qkv", "cutlass_sm90 128x256_n2 (table)"}, {"out", "cublaslt"}};
  const nlohmann::json f = workload(m).at("projection_formats");
  EXPECT_EQ(f.at("qkv").get<std::string>(),
            "int8_convrot G=256 (input from its producer, fused; GEMM cutlass_sm90 128x256_n2 "
            "(table))");
  EXPECT_EQ(f.at("out").get<std::string>(), "int8_convrot G=256 (GEMM cublaslt)");
  EXPECT_EQ(f.at("fc1").get<std::string>(), "int8_convrot G=256");
}

// NVFP4 runs report the DRAM bytes the fused producers save: all four boundaries with static
// input scales (4 x rows x (2 H + I + F) at the seed shape), nothing with computed ones.
TEST(BlockReport, Nvfp4FusionBytesSaved) {
  const H3Config c = H3Config::h3();
  const SequenceLayout layout = make_t2va_layout(100, 207, 37, 48, 84);
  bench::BlockMeasurements m;
  EXPECT_FALSE(bench::block_report(c, layout, m).contains("nvfp4_fusion"));
  m.nvfp4 = true;
  m.nvfp4_static_input_scale = true;
  const nlohmann::json f = bench::block_report(c, layout, m).at("nvfp4_fusion");
  const int64_t s = 37810;
  EXPECT_TRUE(f.at("fused_producers").get<bool>());
  EXPECT_EQ(f.at("dram_bytes_saved_per_block").get<int64_t>(),
            4 * s * (2 * 5376 + 56 * 128 + 14336));
  EXPECT_EQ(f.at("dram_bytes_saved_per_boundary").at("attention->out_proj").get<int64_t>(),
            4 * s * 56 * 128);
  m.nvfp4_static_input_scale = false;
  const nlohmann::json u = bench::block_report(c, layout, m).at("nvfp4_fusion");
  EXPECT_FALSE(u.at("fused_producers").get<bool>());
  EXPECT_EQ(u.at("dram_bytes_saved_per_block").get<int64_t>(), 0);
}

TEST(BlockReport, RejectsUnknownComponents) {
  bench::BlockMeasurements m;
  m.component_ms["made_up"] = {1.0};
  EXPECT_THROW(bench::block_report(H3Config::tiny(), make_t2va_layout(10, 9, 7, 8, 12), m), Error);
}

}  // namespace
}  // namespace h3rt
