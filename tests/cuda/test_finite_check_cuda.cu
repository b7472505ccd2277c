// --check-finite on the GPU: the flag kernel against the CPU scan (bf16 and f32, any length and
// alignment, several tags), and a CUDA denoiser that names the block holding a NaN, eagerly and
// replayed from graphs, with the outputs unchanged by the checks.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>

#include "../cpu/variant_files.h"
#include "cuda_test_util.h"
#include "h3rt/pipeline.h"
#include "model/forward_session_cuda.h"
#include "model/model_cuda.h"
#include "ops/finite_check/finite_check.h"

namespace h3rt {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Runs the kernel once over `bytes` (uploaded at byte offset `offset` of a device buffer).
int flag_of(const std::vector<unsigned char>& bytes, size_t offset, bool bf16, int64_t n, int tag,
            int start = ops::kFiniteFlagClear) {
  Tensor buf = cuda::device_empty(DType::u8, {static_cast<int64_t>(bytes.size() + offset + 16)});
  Tensor flag = cuda::device_empty(DType::i32, {1});
  unsigned char* x = buf.ptr<unsigned char>() + offset;
  EXPECT_EQ(cudaMemcpy(x, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(flag.data(), &start, 4, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(ops::flag_non_finite_cuda(x, bf16, n, tag, flag.ptr<int>(), nullptr), cudaSuccess);
  int got = 0;
  EXPECT_EQ(cudaMemcpy(&got, flag.data(), 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return got;
}

TEST(FiniteCheckCuda, FlagKernelMatchesCpuScan) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const uint16_t specials16[] = {0x7f80, 0xff80, 0x7fc0, 0xffff, 0x7f81};
  const uint32_t specials32[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffffffffu};
  for (bool bf16 : {true, false})
    for (int64_t n :
         {int64_t(1), int64_t(7), int64_t(8), int64_t(9), int64_t(1000), int64_t(1 << 20) + 3})
      for (size_t offset : {size_t(0), size_t(2), size_t(4), size_t(12)}) {
        if (!bf16 && offset % 4) continue;
        const int es = bf16 ? 2 : 4;
        std::vector<unsigned char> bytes(static_cast<size_t>(n) * es);
        std::uniform_int_distribution<int> byte(0, 255);
        for (auto& b : bytes) b = static_cast<unsigned char>(byte(g) & 0x3f);  // finite values
        std::vector<float> host(static_cast<size_t>(n));
        EXPECT_EQ(flag_of(bytes, offset, bf16, n, 9), ops::kFiniteFlagClear) << n << " " << offset;
        const int64_t at = std::uniform_int_distribution<int64_t>(0, n - 1)(g);
        if (bf16) {
          const uint16_t v = specials16[at % 5];
          std::memcpy(bytes.data() + at * 2, &v, 2);
          EXPECT_EQ(
              ops::first_non_finite_bf16_cpu(reinterpret_cast<const uint16_t*>(bytes.data()), n),
              at);
        } else {
          const uint32_t v = specials32[at % 4];
          std::memcpy(bytes.data() + at * 4, &v, 4);
          EXPECT_EQ(ops::first_non_finite_cpu(reinterpret_cast<const float*>(bytes.data()), n), at);
        }
        EXPECT_EQ(flag_of(bytes, offset, bf16, n, 9), 9) << n << " " << offset << " at " << at;
        EXPECT_EQ(flag_of(bytes, offset, bf16, n, 9, 4), 4) << "a lower tag stays";
        if (at > 0) EXPECT_EQ(flag_of(bytes, offset, bf16, at, 9), ops::kFiniteFlagClear);
      }
}

std::unique_ptr<Denoiser> cuda_denoiser(const std::map<std::string, Tensor>& w, CheckFinite c) {
  DenoiserOptions o;
  o.device = Device::cuda;
  o.check_finite = c;
  return Denoiser::create(w, o);
}

std::string sample_error(Denoiser& d, int steps) {
  SampleOptions o;
  o.steps = steps;
  try {
    sample(d, test::small_request(d.config()), o);
  } catch (const NonFinite& e) {
    return e.what();
  }
  return "";
}

TEST(FiniteCheckCuda, DenoiserNamesTheBlockHoldingNaN) {
  H3RT_REQUIRE_GPU();
  const auto w = test::golden_weights_with("blocks.1.mlp.fc2.weight", 5, kNaN);
  {
    auto d = cuda_denoiser(w, CheckFinite::first_step);
    const std::string msg = sample_error(*d, 3);
    EXPECT_NE(msg.find("step 1: the output of block 1 (blocks.1.*) holds NaN or Inf"),
              std::string::npos)
        << msg;
  }
  try {  // every step: the weight scan at load names the tensor before any forward
    cuda_denoiser(w, CheckFinite::every_step);
    ADD_FAILURE() << "a NaN weight loaded under --check-finite all";
  } catch (const NonFinite& e) {
    EXPECT_NE(std::string(e.what()).find("weight 'blocks.1.mlp.fc2.weight' holds NaN"),
              std::string::npos)
        << e.what();
  }
  auto off = cuda_denoiser(w, CheckFinite::off);
  EXPECT_EQ(sample_error(*off, 2), "");
  const auto r = test::golden_weights_with("token_refiner.blocks.0.mlp.fc1.weight", 0, kNaN);
  auto d = cuda_denoiser(r, CheckFinite::first_step);
  const std::string msg = sample_error(*d, 1);
  EXPECT_NE(msg.find("step 1: the token refiner's output (token_refiner.*) holds NaN"),
            std::string::npos)
      << msg;
}

// Checks run inside captured graphs too (graphs with and without checks are kept apart), and
// no policy changes a bit of the result.
TEST(FiniteCheckCuda, ChecksInGraphsAndUnchangedOutputs) {
  H3RT_REQUIRE_GPU();
  const auto clean = test::golden_weights_with("final_layer.norm.weight", 0, 1.0f);
  SampleOptions o;
  o.steps = 4;
  SampleResult res[3];
  int k = 0;
  for (CheckFinite c : {CheckFinite::off, CheckFinite::first_step, CheckFinite::every_step}) {
    auto d = cuda_denoiser(clean, c);
    res[k++] = sample(*d, test::small_request(d->config()), o);
  }
  for (int i = 1; i < 3; ++i) {
    test::expect_same_bits(res[i].video_latents, res[0].video_latents, "video_latents");
    test::expect_same_bits(res[i].audio_latents, res[0].audio_latents, "audio_latents");
  }
  // A session replaying a graph with checks, then a NaN written into block 1's fc2 weight on the
  // device: the next replay names block 1; a session without checks replays it silently.
  for (bool check : {true, false}) {
    SCOPED_TRACE(check ? "checks on" : "checks off");
    const H3Config c = H3Config::tiny();
    model::DeviceModel dev = model::make_synthetic_device_model(c, 11);
    const SequenceLayout layout = make_t2va_layout(4, 3, 2, 4, 4);
    model::ForwardSessionCuda session(dev, layout);
    session.set_check_finite(check);
    std::vector<float> video(layout.video_rows() * c.video_features(), 0.25f),
        audio(layout.audio_rows() * c.audio_channels, -0.5f),
        text(layout.text_len * c.text_dim, 0.125f);
    const TimestepPlan plan = make_timestep_plan(layout, 0.3f, 0.6f);
    const ForwardInputs in{layout, plan, video.data(), audio.data(), text.data()};
    for (int step = 0; step < 3; ++step) session.forward(in);  // eager, capture, replay
    ASSERT_TRUE(session.last_times().graph);
    const uint16_t nan_bits = 0x7fc0;
    ASSERT_EQ(cudaMemcpy(dev.blocks[1].fc2.w.data(), &nan_bits, 2, cudaMemcpyHostToDevice),
              cudaSuccess);
    bool threw = false;
    try {
      session.forward(in);
      EXPECT_TRUE(session.last_times().graph);
    } catch (const NonFinite& e) {
      threw = true;
      EXPECT_NE(std::string(e.what()).find("the output of block 1 (blocks.1.*) holds NaN or Inf"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(threw, check);
  }
}

}  // namespace
}  // namespace h3rt
