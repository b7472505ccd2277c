// The GPU LoRA merge against the host merge, bit for bit: the rotation and delta kernels
// against their host functions on random data (the seed is printed with any failure), and the
// whole merge of a LoRA into the tiny model's int8_convrot, bf16 and f32 layers on the device
// against the host merge uploaded; unmerge restores the uploaded tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../cpu/test_util.h"
#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "cuda_test_util.h"
#include "h3rt/int8.h"
#include "h3rt/lora.h"
#include "h3rt/quantize.h"
#include "model/lora_cuda.h"
#include "model/lora_internal.h"
#include "model/model_cuda.h"
#include "ops/lora_merge/lora_merge.h"

namespace h3rt {
namespace {

std::vector<float> random_f32(size_t n, std::mt19937_64& g, bool wide) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-40, 40);
  std::vector<float> v(n);
  for (float& x : v) x = wide ? std::ldexp(d(g), e(g)) : d(g);
  return v;
}

std::vector<float> from_device(const Tensor& t) {
  return cuda::to_host(t).to_f32();
}

std::vector<uint8_t> device_bytes(const Tensor& t) {
  if (!t.data()) return {};
  const Tensor h = cuda::to_host(t);
  const auto* p = static_cast<const uint8_t*>(h.data());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

Tensor upload(const std::vector<float>& v, Shape shape) {
  return cuda::to_device(tensor_from_f32(v, std::move(shape)));
}

TEST(LoraCuda, RotationIsTheHostButterflies) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  for (int group : {4, 16, 64, 256, 1024})
    for (bool wide : {false, true}) {
      const int64_t rows = 7, k = 2048;
      const std::vector<float> x = random_f32(rows * k, g, wide);
      std::vector<float> want(x.size());
      hadamard_rotate_rows(x.data(), want.data(), rows, k, group);
      const Tensor dx = upload(x, {rows, k});
      Tensor dy = cuda::device_empty(DType::f32, {rows, k});
      ASSERT_EQ(
          ops::lora_rotate_rows_cuda(dx.ptr<float>(), dy.ptr<float>(), rows, k, group, nullptr),
          cudaSuccess);
      test::expect_same_bits(from_device(dy), want, "rotate G=" + std::to_string(group));
    }
}

TEST(LoraCuda, DeltaIsTheHostFmaChain) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  struct Shape3 {
    int64_t out, in, rank;
  };
  for (const Shape3 s :
       {Shape3{1, 1, 1}, Shape3{130, 70, 17}, Shape3{64, 64, 64}, Shape3{300, 1000, 70}}) {
    const std::vector<float> w = random_f32(s.out * s.in, g, true);
    const std::vector<float> up = random_f32(s.out * s.rank, g, false);
    const std::vector<float> down = random_f32(s.rank * s.in, g, false);
    const float scale = 0.3125f;
    std::vector<float> want = w;
    model::add_lora_delta(want.data(), s.out, s.in, up, down, s.rank, scale);
    Tensor dw = upload(w, {s.out, s.in});
    const Tensor du = upload(up, {s.out, s.rank}), dd = upload(down, {s.rank, s.in});
    ASSERT_EQ(ops::lora_add_delta_cuda(dw.ptr<float>(), s.out, s.in, du.ptr<float>(),
                                       dd.ptr<float>(), s.rank, scale, nullptr),
              cudaSuccess);
    test::expect_same_bits(from_device(dw), want,
                           "delta " + std::to_string(s.out) + "x" + std::to_string(s.in) + " r" +
                               std::to_string(s.rank));
  }
}

// A LoRA over int8_convrot block projections (G = 16), bf16 layers (condition_proj, an AdaLN
// layer) and an f32 island (video_patch_proj), two LoRAs on one layer.
void write_lora(const std::string& path, uint64_t seed) {
  std::mt19937_64 g(seed);
  NamedTensors t;
  auto add = [&](const std::string& layer, int64_t out, int64_t in, int64_t rank) {
    t.emplace_back("diffusion_model." + layer + ".lora_B.weight",
                   tensor_from_f32(random_f32(out * rank, g, false), {out, rank}, DType::bf16));
    t.emplace_back("diffusion_model." + layer + ".lora_A.weight",
                   tensor_from_f32(random_f32(rank * in, g, false), {rank, in}, DType::bf16));
    t.emplace_back("diffusion_model." + layer + ".alpha", tensor_from_f32({float(rank) / 2}, {}));
  };
  add("blocks.0.attn.qkv_proj", 768, 192, 8);
  add("blocks.1.mlp.fc2", 192, 384, 20);
  add("token_refiner.blocks.0.mlp.fc1", 768, 192, 4);
  add("condition_proj", 192, 64, 4);
  add("blocks.1.adaln_proj.linear", 3456, 96, 3);
  add("video_patch_proj", 192, 96, 5);
  write_safetensors(path, t);
}

TEST(LoraCuda, ModelMergeEqualsTheHostMergeAndUnmergeRestores) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string dir = ::testing::TempDir();
  const std::string ck = dir + "/h3rt_lora_int8.safetensors", lp = dir + "/h3rt_lora.safetensors";
  QuantizeCheckpointOptions opt;
  opt.format = WeightFormat::int8;
  opt.int8_group = 16;
  quantize_checkpoint(test::golden_dir() + "/weights.safetensors", ck, opt);
  write_lora(lp, seed);
  const std::vector<Lora> loras = {read_lora({lp, 0.75}), read_lora({lp, -0.5})};

  H3Model host = load_model(ck);
  model::DeviceModel dev = model::upload_model(host);
  model::DeviceModel orig = model::upload_model(host);
  merge_loras(host, loras);
  model::DeviceModel want = model::upload_model(host);
  model::LoraMergeCuda merge = model::merge_loras_cuda(dev, loras);
  EXPECT_EQ(merge.report.pairs, 12);
  EXPECT_EQ(merge.report.layers, 6);
  auto got_layers = model::device_linear_layers(dev),
       want_layers = model::device_linear_layers(want),
       orig_layers = model::device_linear_layers(orig);
  int int8_layers = 0;
  for (const auto& [name, w] : want_layers) {
    const model::DeviceLinear& l = *got_layers.at(name);
    int8_layers += l.int8();
    EXPECT_EQ(device_bytes(l.w), device_bytes(w->w)) << name;
    EXPECT_EQ(device_bytes(l.wi8), device_bytes(w->wi8)) << name;
    EXPECT_EQ(device_bytes(l.wi8_scale), device_bytes(w->wi8_scale)) << name;
  }
  EXPECT_GT(int8_layers, 0);
  EXPECT_NE(device_bytes(got_layers.at("blocks.0.attn.qkv_proj")->wi8),
            device_bytes(orig_layers.at("blocks.0.attn.qkv_proj")->wi8));
  model::unmerge_loras_cuda(dev, merge);
  got_layers = model::device_linear_layers(dev);
  for (const auto& [name, o] : orig_layers) {
    EXPECT_EQ(device_bytes(got_layers.at(name)->w), device_bytes(o->w)) << name;
    EXPECT_EQ(device_bytes(got_layers.at(name)->wi8), device_bytes(o->wi8)) << name;
    EXPECT_EQ(device_bytes(got_layers.at(name)->wi8_scale), device_bytes(o->wi8_scale)) << name;
  }
}

}  // namespace
}  // namespace h3rt
