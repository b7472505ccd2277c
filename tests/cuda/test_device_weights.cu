// Denoiser::create from a caller's tensors with the int8_convrot weight bytes already in device
// memory (what the Python package and the ComfyUI node pass for a loaded quantized model): the
// CUDA model uses those bytes in place (its weight tensors point at the caller's memory, and the
// arena allocates less by at least their size) and the forward is bit-identical to the same
// checkpoint loaded from its file. bf16 linear weights likewise (Bf16WeightsUsedInPlace).
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
#include "model/model_cuda.h"

namespace h3rt {
namespace {

bool is_weight_bytes(const std::string& key, const Tensor& t) {
  return t.dtype() == DType::i8 && key.size() > 7 && key.rfind(".weight") == key.size() - 7;
}

// Denoisers from `host` tensors and from `mixed` (the same with some in device memory, of
// `in_place_bytes` the model must use where they are): the second allocates less by at least
// those bytes, and both forwards give the same bits.
void expect_used_in_place(const std::map<std::string, Tensor>& host,
                          const std::map<std::string, Tensor>& mixed, int64_t in_place_bytes,
                          const char* what) {
  DenoiserOptions o;
  o.device = Device::cuda;
  auto& arena = cuda::default_arena();
  const int64_t before = arena.stats().current_allocated;
  auto from_host = Denoiser::create(host, o);
  const int64_t host_bytes = arena.stats().current_allocated - before;
  auto in_place = Denoiser::create(mixed, o);
  const int64_t place_bytes = arena.stats().current_allocated - before - host_bytes;
  std::printf(
      "[ measured ] weights allocated: %lld bytes from host tensors, %lld with %s "
      "(%lld bytes) in device memory\n",
      static_cast<long long>(host_bytes), static_cast<long long>(place_bytes), what,
      static_cast<long long>(in_place_bytes));
  EXPECT_LE(place_bytes, host_bytes - in_place_bytes);
  const ForwardInputs in = test::golden_inputs().inputs();
  const ForwardOutputs a = from_host->forward(in), b = in_place->forward(in);
  ASSERT_EQ(a.video_velocity.size(), b.video_velocity.size());
  ASSERT_EQ(a.audio_velocity.size(), b.audio_velocity.size());
  EXPECT_EQ(
      std::memcmp(a.video_velocity.data(), b.video_velocity.data(), a.video_velocity.size() * 4),
      0);
  EXPECT_EQ(
      std::memcmp(a.audio_velocity.data(), b.audio_velocity.data(), a.audio_velocity.size() * 4),
      0);
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
  for (const auto& e : f.entries()) {
    const Tensor t = f.get(e.name);
    host[e.name] = t;
    mixed[e.name] = is_weight_bytes(e.name, t) ? cuda::to_device(t) : t;  // the caller's copy
    if (is_weight_bytes(e.name, t)) device_bytes += t.nbytes();
  }
  ASSERT_GT(device_bytes, 0);
  expect_used_in_place(host, mixed, device_bytes, "int8 weights");
}

// bf16 linear weights as CUDA tensors (a bf16 model loaded by the host, e.g. ComfyUI): those on
// bf16 paths are used in place; one on a float32 island (video_patch_proj, stored bf16 here) is
// copied (a warning line), and the forward has the bits of the same tensors in host memory.
TEST(DeviceWeights, Bf16WeightsUsedInPlace) {
  H3RT_REQUIRE_GPU();
  const SafetensorsFile f = SafetensorsFile::open(test::golden_dir() + "/weights.safetensors");
  const std::string island = "video_patch_proj.weight";
  std::map<std::string, Tensor> host, mixed;
  int64_t in_place_bytes = 0;
  for (const auto& e : f.entries()) {
    Tensor t = f.get(e.name);
    if (e.name == island) t = tensor_from_f32(t.to_f32(), t.shape(), DType::bf16);
    host[e.name] = t;
    const bool bf16_weight =
        t.dtype() == DType::bf16 && t.dim() == 2 && e.name.rfind(".weight") == e.name.size() - 7;
    mixed[e.name] = bf16_weight ? cuda::to_device(t) : t;
    if (bf16_weight && e.name != island) in_place_bytes += t.nbytes();
  }
  ASSERT_GT(in_place_bytes, 0);
  expect_used_in_place(host, mixed, in_place_bytes, "bf16 weights");
}

H3Model load_without_float_copies(const std::map<std::string, Tensor>& tensors) {
  LoadOptions o;
  o.dense_float_copies = false;  // as the CUDA model loads
  return load_model(tensors, o);
}

// device_memory_limit auto counts as free the caller's device tensors the model uses in place,
// and only those: a bf16 island (video_patch_proj, uploaded as float32) and fp8 layers without an
// input_scale (run dequantized unless fp8 activations are dynamic) get h3rt's own copies.
TEST(DeviceWeights, InPlaceBytesCountOnlyTheLayersUsedAsStored) {
  H3RT_REQUIRE_GPU();
  const SafetensorsFile f = SafetensorsFile::open(test::golden_dir() + "/weights.safetensors");
  const std::string island = "video_patch_proj.weight";
  std::map<std::string, Tensor> bf16;
  int64_t used_bf16 = 0;
  for (const auto& e : f.entries()) {
    Tensor t = f.get(e.name);
    if (e.name == island) t = tensor_from_f32(t.to_f32(), t.shape(), DType::bf16);
    const bool weight = t.dtype() == DType::bf16 && t.dim() == 2 && e.name.ends_with(".weight");
    bf16[e.name] = weight ? cuda::to_device(t) : t;
    if (weight && e.name != island) used_bf16 += t.nbytes();
  }
  ASSERT_GT(used_bf16, 0);
  EXPECT_EQ(model::in_place_device_bytes(load_without_float_copies(bf16)), used_bf16);

  const std::string file = ::testing::TempDir() + "/h3rt_device_weights_fp8.safetensors";
  QuantizeCheckpointOptions opt;
  opt.format = WeightFormat::fp8_scaled;
  quantize_checkpoint(test::golden_dir() + "/weights.safetensors", file, opt);
  const SafetensorsFile q = SafetensorsFile::open(file);
  std::map<std::string, Tensor> fp8;
  int64_t e4m3_bytes = 0;
  for (const auto& e : q.entries()) {
    if (e.name.ends_with(".input_scale")) continue;  // activations scaled per call, or not at all
    const Tensor t = q.get(e.name);
    const bool bytes = t.dtype() == DType::e4m3;
    fp8[e.name] = bytes ? cuda::to_device(t) : t;
    if (bytes) e4m3_bytes += t.nbytes();
  }
  ASSERT_GT(e4m3_bytes, 0);
  H3Model m = load_without_float_copies(fp8);
  EXPECT_EQ(model::in_place_device_bytes(m), 0);  // all dequantized: h3rt's bf16 copies
  ASSERT_GT(set_fp8_activations(m, Fp8Activations::dynamic), 0);
  EXPECT_EQ(model::in_place_device_bytes(m), e4m3_bytes);
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
