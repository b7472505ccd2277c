// #20 item 8: the same request sampled twice on the GPU gives bit-identical latents, with CUDA
// graphs (each a fresh denoiser, so capture happens again) and without them, for the reference
// Euler loop and ComfyUI's res_multistep loop. (CPU and GPU noise agree bit for bit:
// test_noise_cuda.cu.)
#include <gtest/gtest.h>

#include "../cpu/test_util.h"
#include "../cpu/variant_files.h"
#include "cuda_test_util.h"
#include "h3rt/pipeline.h"

namespace h3rt {
namespace {

SampleResult run(bool graphs, const SampleOptions& so) {
  DenoiserOptions o;
  o.device = Device::cuda;
  o.cuda_graphs = graphs;
  auto d = Denoiser::create(ModelSource{}, o);  // the tiny preset
  return sample(*d, test::small_request(d->config()), so);
}

void expect_same(const SampleResult& a, const SampleResult& b, const std::string& what) {
  test::expect_same_bits(a.video_latents, b.video_latents, what + " video_latents");
  test::expect_same_bits(a.audio_latents, b.audio_latents, what + " audio_latents");
}

TEST(DeterminismCuda, SameRequestSameBitsGraphAndEager) {
  H3RT_REQUIRE_GPU();
  SampleOptions euler;
  euler.steps = 4;
  SampleOptions comfy = euler;
  comfy.scheduler = Scheduler::simple;
  comfy.sampler = SamplerKind::res_multistep;
  for (const SampleOptions& so : {euler, comfy}) {
    const std::string what = so.scheduler == Scheduler::simple ? "res_multistep" : "euler";
    const SampleResult g1 = run(true, so), g2 = run(true, so), e1 = run(false, so);
    expect_same(g2, g1, what + " graph run 2");
    expect_same(e1, g1, what + " eager");
  }
}

}  // namespace
}  // namespace h3rt
