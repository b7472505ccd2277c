// The tiny model with int8_convrot block projections (quantize-checkpoint, G = 64) on the GPU:
// the W8A8 path (rotate + quantize each activation row, int8 GEMM) must stay as close to the CPU
// fp32 forward of the same checkpoint as the CPU bf16 forward is (mean error within 2x, max
// within 3x, the rule the other quantized checkpoints' GPU tests use).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../cpu/golden_inputs.h"
#include "cuda_test_util.h"
#include "h3rt/model.h"
#include "h3rt/quantize.h"
#include "model/model_cuda.h"

namespace h3rt {
namespace {

using test::Err;
using test::error;

TEST(Int8Forward, ConvrotCheckpointTracksCpuReference) {
  H3RT_REQUIRE_GPU();
  const std::string file = ::testing::TempDir() + "/h3rt_int8_convrot.safetensors";
  QuantizeCheckpointOptions opt;
  opt.format = WeightFormat::int8;
  opt.int8_group = 64;
  quantize_checkpoint(test::golden_dir() + "/weights.safetensors", file, opt);
  const ForwardInputs in = test::golden_inputs().inputs();
  H3Model host = load_model(file);
  model::DeviceModel dev = model::upload_model(host);
  ASSERT_TRUE(dev.has_int8());
  EXPECT_FALSE(dev.has_fp8());
  EXPECT_EQ(dev.blocks[0].qkv.int8_group, 64);
  const ForwardOutputs ref = forward_cpu(host, in, Precision::fp32);
  const ForwardOutputs cpu = forward_cpu(host, in, Precision::bf16);
  const ForwardOutputs gpu = model::forward_cuda(dev, in);
  for (int k = 0; k < 2; ++k) {
    const FloatVec& r = k ? ref.audio_velocity : ref.video_velocity;
    const Err c = error(k ? cpu.audio_velocity : cpu.video_velocity, r);
    const Err g = error(k ? gpu.audio_velocity : gpu.video_velocity, r);
    std::printf("int8_convrot %s: gpu max/mean %.4g/%.4g, cpu bf16 %.4g/%.4g\n",
                k ? "audio" : "video", g.max_abs, g.mean_abs, c.max_abs, c.mean_abs);
    EXPECT_GT(c.mean_abs, 0.0);
    EXPECT_LE(g.mean_abs, 2.0 * c.mean_abs);
    EXPECT_LE(g.max_abs, 3.0 * c.max_abs);
  }
}

}  // namespace
}  // namespace h3rt
