// `h3rt sample --gemm` through the library (DenoiserOptions::synthetic_gemm): the tiny preset
// with its block GEMMs quantized on the device samples deterministically run to run (each run a
// fresh denoiser, so the weights are quantized again), and differently from bf16 (the format
// reached the forward). And a masked ComfyUI-loop run on the GPU keeps the clean latent where
// the mask is 0.
#include <gtest/gtest.h>

#include "../cpu/test_util.h"
#include "../cpu/variant_files.h"
#include "cuda_test_util.h"
#include "h3rt/pipeline.h"

namespace h3rt {
namespace {

SampleResult run(SyntheticGemm gemm, const SampleOptions& so, const Conditioning* k = nullptr) {
  DenoiserOptions o;
  o.device = Device::cuda;
  o.synthetic_gemm = gemm;
  auto d = Denoiser::create(ModelSource{}, o);  // the tiny preset
  Request r = test::small_request(d->config());
  if (k) condition_request(r, d->config(), *k);
  return sample(*d, r, so);
}

TEST(SampleGemmCuda, QuantizedPresetSamplesDeterministically) {
  H3RT_REQUIRE_GPU();
  SampleOptions so;
  so.steps = 3;
  so.scheduler = Scheduler::simple;
  so.sampler = SamplerKind::res_multistep;
  const SampleResult bf16 = run(SyntheticGemm::bf16, so);
  for (SyntheticGemm g : {SyntheticGemm::int8, SyntheticGemm::fp8, SyntheticGemm::nvfp4}) {
    const std::string what = synthetic_gemm_name(g);
    const SampleResult a = run(g, so), b = run(g, so);
    test::expect_same_bits(b.video_latents, a.video_latents, what + " run 2 video");
    test::expect_same_bits(b.audio_latents, a.audio_latents, what + " run 2 audio");
    EXPECT_NE(a.video_latents, bf16.video_latents) << what << " ran as bf16";
  }
}

TEST(SampleGemmCuda, MaskOfZerosKeepsTheCleanLatentOnTheGpu) {
  H3RT_REQUIRE_GPU();
  const H3Config c = *config_preset("tiny");
  const Request shape = test::small_request(c);
  const SequenceLayout& L = shape.layout;
  Conditioning k;
  k.video_mask.assign(L.frames * L.height * L.width, 0.0f);
  k.video_latent_image.resize(shape.video_rows.size());
  gaussian_noise(5, 0, 0, k.video_latent_image.data(),
                 static_cast<int64_t>(k.video_latent_image.size()));
  SampleOptions so;
  so.steps = 2;
  so.scheduler = Scheduler::simple;
  const SampleResult got = run(SyntheticGemm::int8, so, &k);
  test::expect_same_bits(got.video_latents, k.video_latent_image, "video where m = 0");
}

}  // namespace
}  // namespace h3rt
