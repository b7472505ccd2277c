// The whole bf16 forward on the GPU against the golden tiny set, and the GPU-generated synthetic
// weights against the host generator.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "../cpu/golden_inputs.h"
#include "cuda_test_util.h"
#include "h3rt/layout.h"
#include "h3rt/model.h"
#include "h3rt/quantize.h"
#include "h3rt/safetensors.h"
#include "model/model_cuda.h"

namespace h3rt {
namespace {

std::string golden_file(const std::string& name) {
  return test::golden_dir() + "/" + name;
}

using test::Err;
using test::error;

TEST(ForwardCuda, GoldenBf16WithinTwiceCpuBf16Error) {
  H3RT_REQUIRE_GPU();
  const test::GoldenInputs& golden = test::golden_inputs();
  const SafetensorsFile& g = golden.file;
  H3Model host = load_model(golden_file("weights.safetensors"));
  const ForwardInputs in = golden.inputs();

  model::DeviceModel dev = model::upload_model(host);
  ForwardOutputs gpu = model::forward_cuda(dev, in);
  ForwardOutputs cpu = forward_cpu(host, in, Precision::bf16);
  const auto ref_v = g.get("fwd_f64/video_velocity").to_f64();
  const auto ref_a = g.get("fwd_f64/audio_velocity").to_f64();
  const Err gv = error(gpu.video_velocity, ref_v), ga = error(gpu.audio_velocity, ref_a);
  const Err cv = error(cpu.video_velocity, ref_v), ca = error(cpu.audio_velocity, ref_a);
  std::printf(
      "video max/mean: gpu %.4g/%.4g cpu-bf16 %.4g/%.4g; audio gpu %.4g/%.4g cpu-bf16 "
      "%.4g/%.4g\n",
      gv.max_abs, gv.mean_abs, cv.max_abs, cv.mean_abs, ga.max_abs, ga.mean_abs, ca.max_abs,
      ca.mean_abs);
  EXPECT_GT(cv.max_abs, 0.0);
  EXPECT_LE(gv.max_abs, 2.0 * cv.max_abs);
  EXPECT_LE(gv.mean_abs, 2.0 * cv.mean_abs);
  EXPECT_LE(ga.max_abs, 2.0 * ca.max_abs);
  EXPECT_LE(ga.mean_abs, 2.0 * ca.mean_abs);
}

TEST(ForwardCuda, DeviceSyntheticWeightsEqualHostSynthetic) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const H3Config c = H3Config::tiny();
  H3Model host = make_synthetic_model(c, seed);
  model::DeviceModel dev = model::make_synthetic_device_model(c, seed);
  auto same = [](const Tensor& d, const FloatVec& h) {
    std::vector<float> v = cuda::to_host(d).to_f32();
    ASSERT_EQ(v.size(), h.size());
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], h[i]) << "element " << i;
  };
  same(dev.blocks[1].qkv.w, host.weights.blocks[1].attn.qkv.w);
  same(dev.blocks[0].norm2, host.weights.blocks[0].norm2);
  same(dev.blocks[0].adaln.b, host.weights.blocks[0].adaln.b);
  same(dev.refiner[0].fc2.w, host.weights.refiner[0].mlp.fc2.w);
  same(dev.video_in.w, host.weights.video_in.w);
  same(dev.final_norm, host.weights.final_norm);
  EXPECT_EQ(dev.time_out_w, host.weights.time_out.w);
}

// A quantized checkpoint (from quantize-checkpoint), without and with static input scales: the
// GPU forward must stay as close to the CPU fp32 forward of the same checkpoint as the CPU bf16
// forward is (mean error within 2x, max within 3x). fp8_scaled with input scales runs the fp8
// e4m3 GEMMs (without, the weights are dequantized to bf16); nvfp4 always runs W4A4 GEMMs, with
// the activation's global scale computed on the device when the checkpoint has no input_scale.
void quantized_checkpoint_tracks_cpu(WeightFormat format, float input_scale) {
  const std::string dir = ::testing::TempDir();
  const std::string name = format == WeightFormat::nvfp4 ? "nvfp4" : "fp8";
  const std::string plain = dir + "/h3rt_" + name + ".safetensors",
                    with_in = dir + "/h3rt_" + name + "_in.safetensors";
  QuantizeCheckpointOptions opt;
  opt.format = format;
  quantize_checkpoint(golden_file("weights.safetensors"), plain, opt);
  {
    SafetensorsFile f = SafetensorsFile::open(plain);
    NamedTensors all;
    for (const auto& e : f.entries()) all.push_back({e.name, f.get(e.name)});
    const std::string marker = ".comfy_quant";
    for (const auto& e : f.entries())
      if (e.name.size() > marker.size() &&
          e.name.compare(e.name.size() - marker.size(), marker.size(), marker) == 0)
        all.push_back({e.name.substr(0, e.name.size() - marker.size()) + ".input_scale",
                       tensor_from_f32({input_scale}, {})});
    write_safetensors(with_in, all, f.metadata());
  }
  const ForwardInputs in = test::golden_inputs().inputs();
  for (const std::string& file : {plain, with_in}) {
    SCOPED_TRACE(file);
    H3Model host = load_model(file);
    model::DeviceModel dev = model::upload_model(host);
    if (format == WeightFormat::nvfp4) {
      EXPECT_TRUE(dev.has_nvfp4());
      EXPECT_FALSE(dev.has_fp8());
    } else {
      EXPECT_EQ(dev.has_fp8(), file == with_in);
    }
    const ForwardOutputs ref = forward_cpu(host, in, Precision::fp32);
    const ForwardOutputs cpu = forward_cpu(host, in, Precision::bf16);
    const ForwardOutputs gpu = model::forward_cuda(dev, in);
    for (int k = 0; k < 2; ++k) {
      const FloatVec& r = k ? ref.audio_velocity : ref.video_velocity;
      const std::vector<double> rd(r.begin(), r.end());
      const Err c = error(k ? cpu.audio_velocity : cpu.video_velocity, rd);
      const Err g = error(k ? gpu.audio_velocity : gpu.video_velocity, rd);
      std::printf("%s %s: gpu max/mean %.4g/%.4g, cpu bf16 %.4g/%.4g\n", file.c_str(),
                  k ? "audio" : "video", g.max_abs, g.mean_abs, c.max_abs, c.mean_abs);
      EXPECT_GT(c.mean_abs, 0.0);
      EXPECT_LE(g.mean_abs, 2.0 * c.mean_abs);
      EXPECT_LE(g.max_abs, 3.0 * c.max_abs);
    }
  }
}

TEST(ForwardCuda, Fp8ScaledCheckpointTracksCpuReference) {
  H3RT_REQUIRE_GPU();
  quantized_checkpoint_tracks_cpu(WeightFormat::fp8_scaled, 16.0f / 448.0f);
}

TEST(ForwardCuda, Nvfp4CheckpointTracksCpuReference) {
  H3RT_REQUIRE_GPU();
  quantized_checkpoint_tracks_cpu(WeightFormat::nvfp4, 16.0f / 2688.0f);
}

}  // namespace
}  // namespace h3rt
