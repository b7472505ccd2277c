// Denoiser::create from a caller's tensors with the int8_convrot weight bytes already in device
// memory (what the Python package and the ComfyUI node pass for a loaded quantized model): the
// CUDA model uses those bytes in place (its weight tensors point at the caller's memory, and the
// arena allocates less by at least their size) and the forward is bit-identical to the same
// checkpoint loaded from its file.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "../cpu/golden_inputs.h"
#include "cuda/arena.h"
#include "cuda_test_util.h"
#include "h3rt/pipeline.h"
#include "h3rt/quantize.h"
#include "h3rt/safetensors.h"

namespace h3rt {
namespace {

bool is_weight_bytes(const std::string& key, const Tensor& t) {
  return t.dtype() == DType::i8 && key.size() > 7 && key.rfind(".weight") == key.size() - 7;
}

TEST(DeviceWeights, Int8WeightBytesUsedInPlace) {
  H3RT_REQUIRE_GPU();
  const std::string file = ::testing::TempDir() + "/h3rt_device_weights_int8.safetensors";
  QuantizeCheckpointOptions opt;
  opt.format = WeightFormat::int8;
  opt.int8_group = 64;
  quantize_checkpoint(test::golden_dir() + "/weights.safetensors", file, opt);
  const SafetensorsFile f = SafetensorsFile::open(file);
  std::map<std::string, Tensor> host, mixed;
  int64_t device_bytes = 0;
  int moved = 0;
  for (const auto& e : f.entries()) {
    const Tensor t = f.get(e.name);
    host[e.name] = t;
    if (!is_weight_bytes(e.name, t)) {
      mixed[e.name] = t;
      continue;
    }
    mixed[e.name] = cuda::to_device(t);  // the caller's device copy
    device_bytes += t.nbytes();
    ++moved;
  }
  ASSERT_GT(moved, 0);
  DenoiserOptions o;
  o.device = Device::cuda;
  auto& arena = cuda::default_arena();
  const int64_t before = arena.stats().current_allocated;
  auto from_file = Denoiser::create(host, o);
  const int64_t file_bytes = arena.stats().current_allocated - before;
  auto in_place = Denoiser::create(mixed, o);
  const int64_t place_bytes = arena.stats().current_allocated - before - file_bytes;
  std::printf("[ measured ] weights allocated: %lld bytes from host tensors, %lld with %d int8 "
              "weights (%lld bytes) in device memory\n",
              static_cast<long long>(file_bytes), static_cast<long long>(place_bytes), moved,
              static_cast<long long>(device_bytes));
  EXPECT_LE(place_bytes, file_bytes - device_bytes);
  const ForwardInputs in = test::golden_inputs().inputs();
  const ForwardOutputs a = from_file->forward(in), b = in_place->forward(in);
  ASSERT_EQ(a.video_velocity.size(), b.video_velocity.size());
  ASSERT_EQ(a.audio_velocity.size(), b.audio_velocity.size());
  EXPECT_EQ(std::memcmp(a.video_velocity.data(), b.video_velocity.data(),
                        a.video_velocity.size() * 4), 0);
  EXPECT_EQ(std::memcmp(a.audio_velocity.data(), b.audio_velocity.data(),
                        a.audio_velocity.size() * 4), 0);
}

// Device weight bytes for a CPU model: a clear error naming the tensor, not a crash.
TEST(DeviceWeights, CpuModelRefusesDeviceTensors) {
  H3RT_REQUIRE_GPU();
  const std::string file = ::testing::TempDir() + "/h3rt_device_weights_int8b.safetensors";
  QuantizeCheckpointOptions opt;
  opt.format = WeightFormat::int8;
  opt.int8_group = 64;
  quantize_checkpoint(test::golden_dir() + "/weights.safetensors", file, opt);
  const SafetensorsFile f = SafetensorsFile::open(file);
  std::map<std::string, Tensor> mixed;
  for (const auto& e : f.entries()) {
    const Tensor t = f.get(e.name);
    mixed[e.name] = is_weight_bytes(e.name, t) ? cuda::to_device(t) : t;
  }
  try {
    Denoiser::create(mixed, DenoiserOptions{});
    FAIL() << "a CPU model over device weight bytes was created";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device memory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace h3rt
