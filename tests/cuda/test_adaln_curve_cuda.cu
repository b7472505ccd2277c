// The curve-form AdaLN and PDD head banks on the GPU: the float32 AdaLN projection and the
// float32 final modulation bit-exact with the CPU reference, and whole forwards of the curve
// and PDD variants of the golden model against the CPU (eager and graph-replayed sessions).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "../cpu/golden_inputs.h"
#include "../cpu/variant_files.h"
#include "cuda_test_util.h"
#include "h3rt/model.h"
#include "h3rt/sampler.h"
#include "model/forward_session_cuda.h"
#include "model/model_cuda.h"
#include "ops/adaln_curve/adaln_curve.h"
#include "ops/linear/linear.h"

namespace h3rt {
namespace {

std::vector<float> normal(size_t n, std::mt19937_64& g, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

Tensor device(const std::vector<float>& v) {
  return cuda::to_device(tensor_from_f32(v, {int64_t(v.size())}));
}

// The published shape: [M, 8] x [8, 96768], float32 and bf16 outputs, bits as linear_cpu's.
TEST(AdalnCurveCuda, LinearBitExactWithCpu) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const int64_t M = 3, K = 8, N = 96768;
  const std::vector<float> x = normal(M * K, g, 1.0f), w = normal(N * K, g, 0.3f),
                           b = normal(N, g, 0.1f);
  const Tensor dx = device(x), dw = device(w), db = device(b);
  for (bool bf16 : {false, true}) {
    std::vector<float> want(M * N);
    ops::linear_cpu({.x = x.data(),
                     .w = w.data(),
                     .bias = b.data(),
                     .y = want.data(),
                     .rows = M,
                     .in = K,
                     .out = N,
                     .round_bf16 = bf16});
    Tensor dy = cuda::device_empty(bf16 ? DType::bf16 : DType::f32, {M, N});
    ops::AdalnCurveLinearCudaParams p;
    p.x = dx.ptr<float>();
    p.w = dw.ptr<float>();
    p.bias = db.ptr<float>();
    if (bf16)
      p.y_bf16 = dy.ptr<__nv_bfloat16>();
    else
      p.y = dy.ptr<float>();
    p.rows = M;
    p.in = K;
    p.out = N;
    H3RT_CUDA_CHECK(ops::adaln_curve_linear_cuda(p, nullptr));
    H3RT_CUDA_CHECK(cudaDeviceSynchronize());
    test::expect_same_bits(cuda::to_host(dy).to_f32(), want, bf16 ? "bf16 out" : "f32 out");
  }
}

TEST(AdalnCurveCuda, ModulateBitExactWithCpu) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const int64_t rows = 37, H = 192, M = 2;
  const test::Bf16Data n = test::random_bf16(rows * H, g, 0.0f, 1.0f);
  const std::vector<float> table = normal(M * 2 * H, g, 0.5f);
  std::vector<int64_t> idx(rows);
  for (int64_t r = 0; r < rows; ++r) idx[r] = r % M;
  std::vector<float> want(rows * H);
  ops::curve_modulate_cpu(
      {n.f.data(), table.data(), table.data() + H, idx.data(), want.data(), rows, H, 2 * H});
  Tensor dn = cuda::to_device(tensor_from_f32(n.f, {rows, H}, DType::bf16));
  Tensor dt = device(table), dy = cuda::device_empty(DType::f32, {rows, H});
  Tensor di = cuda::to_device(Tensor(idx.data(), DType::i64, {rows}).contiguous_copy());
  ops::CurveModulateCudaParams p;
  p.n = dn.ptr<__nv_bfloat16>();
  p.shift = dt.ptr<float>();
  p.scale = dt.ptr<float>() + H;
  p.row_table_index = di.ptr<int64_t>();
  p.y = dy.ptr<float>();
  p.rows = rows;
  p.dim = H;
  p.table_row_stride = 2 * H;
  H3RT_CUDA_CHECK(ops::curve_modulate_cuda(p, nullptr));
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  test::expect_same_bits(cuda::to_host(dy).to_f32(), want, "modulated rows");
}

using test::Err;
using test::error;

// A variant file through the GPU session over a 2-step schedule, eager and graph-replayed: the
// two give the same bits, and each step stays as close to the CPU fp32 forward of the same
// model as the CPU bf16 forward is (mean error within 2x, max within 3x, as the other
// checkpoint-variant GPU tests).
void variant_tracks_cpu(const std::string& path) {
  const H3Model host = load_model(path);
  const model::DeviceModel dev = model::upload_model(host);
  const test::GoldenInputs& g = test::golden_inputs();
  const SamplerPlan plan = make_sampler_plan(g.layout, 3);
  model::ForwardSessionOptions eager_opt;
  eager_opt.cuda_graph = false;
  model::ForwardSessionCuda eager(dev, g.layout, eager_opt), graph(dev, g.layout);
  for (int rep = 0; rep < 2; ++rep)
    for (int i = 0; i < 2; ++i) {
      SCOPED_TRACE(path + " step " + std::to_string(i));
      const SigmaSchedule s = sigma_schedule(plan, i);
      ForwardInputs in{g.layout,       plan.steps[i].plan, g.video.data(),
                       g.audio.data(), g.text.data(),      &s};
      const ForwardOutputs ge = eager.forward(in), gg = graph.forward(in);
      test::expect_same_bits(gg.video_velocity, ge.video_velocity, "graph vs eager video");
      test::expect_same_bits(gg.audio_velocity, ge.audio_velocity, "graph vs eager audio");
      if (rep) continue;
      const ForwardOutputs ref = forward_cpu(host, in, Precision::fp32);
      const ForwardOutputs cpu = forward_cpu(host, in, Precision::bf16);
      for (int k = 0; k < 2; ++k) {
        const FloatVec& r = k ? ref.audio_velocity : ref.video_velocity;
        const Err c = error(k ? cpu.audio_velocity : cpu.video_velocity, r);
        const Err e = error(k ? ge.audio_velocity : ge.video_velocity, r);
        std::printf("%s step %d %s: gpu max/mean %.4g/%.4g, cpu bf16 %.4g/%.4g\n", path.c_str(), i,
                    k ? "audio" : "video", e.max_abs, e.mean_abs, c.max_abs, c.mean_abs);
        EXPECT_GT(c.mean_abs, 0.0);
        EXPECT_LE(e.mean_abs, 2.0 * c.mean_abs);
        EXPECT_LE(e.max_abs, 3.0 * c.max_abs);
      }
    }
}

TEST(AdalnCurveCuda, CurveFormForwardTracksCpu) {
  H3RT_REQUIRE_GPU();
  const std::string path = ::testing::TempDir() + "/h3rt_curve_cuda.safetensors";
  test::write_exact_curve_file(path, 65, DType::f16);  // f16 AdaLN storage, as published
  variant_tracks_cpu(path);
}

TEST(AdalnCurveCuda, PddBankForwardTracksCpuAndNeedsSchedule) {
  H3RT_REQUIRE_GPU();
  const std::string path = ::testing::TempDir() + "/h3rt_pdd_cuda.safetensors";
  test::write_pdd_file(path, 4);
  variant_tracks_cpu(path);
  const H3Model host = load_model(path);
  const model::DeviceModel dev = model::upload_model(host);
  EXPECT_THROW(model::forward_cuda(dev, test::golden_inputs().inputs()), Error);
}

}  // namespace
}  // namespace h3rt
