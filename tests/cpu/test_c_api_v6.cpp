// The C API's version-6 call (h3rt/h3rt.h): h3rt_model_weight_streaming on the CPU (no limit:
// every field zero) and its argument errors. The GPU case: tests/cuda/test_c_api_v5_cuda.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "h3rt/h3rt.h"
#include "test_util.h"

namespace h3rt {
namespace {

TEST(CApiV6, WeightStreamingOnTheCpuIsAllZero) {
  EXPECT_GE(h3rt_api_version(), 6);
  h3rt_model* m = nullptr;
  ASSERT_EQ(h3rt_model_create((test::golden_dir() + "/weights.safetensors").c_str(), nullptr, &m),
            H3RT_OK)
      << h3rt_last_error();
  h3rt_weight_streaming w;
  std::memset(&w, 0x5a, sizeof w);  // every field must be written
  ASSERT_EQ(h3rt_model_weight_streaming(m, &w), H3RT_OK) << h3rt_last_error();
  EXPECT_EQ(w.device_memory_limit, 0);
  EXPECT_EQ(w.limit_auto, 0);
  EXPECT_EQ(w.streamed, 0);
  EXPECT_EQ(w.streamed_at_load, 0);
  EXPECT_EQ(w.slots, 0);
  EXPECT_EQ(w.streamed_blocks, 0);
  EXPECT_EQ(w.h2d_bytes_per_step, 0);
  EXPECT_EQ(w.host_bytes, 0);
  ASSERT_NE(w.source, nullptr);
  EXPECT_STREQ(w.source, "");
  EXPECT_EQ(h3rt_model_weight_streaming(m, nullptr), H3RT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(h3rt_last_error()).find("null out"), std::string::npos);
  EXPECT_EQ(h3rt_model_weight_streaming(nullptr, &w), H3RT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(h3rt_last_error()).find("h3rt_model_weight_streaming: null model"),
            std::string::npos);
  h3rt_model_free(m);
}

}  // namespace
}  // namespace h3rt
