// GPU checks of the sparse check (h3rt/hybrid.h SparseCheck, ops::attention_sparse_check_cuda):
// the sampled rows of the check's dense call have the dense Sage call's bits and no other row is
// written; its per-head sums equal a host computation on the same device outputs; the router's
// dense heads give those heads the dense bits; the sampling loop with the check on (eager check
// steps, graphs replayed after the flags change, a graph captured before they changed) equals
// the dense forward bit for bit from the step after a bound-0 check, and a later run without
// the check gets the plain sparse bits again.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../cpu/dense_twin.h"
#include "../cpu/sparse_test_util.h"
#include "../cpu/test_util.h"
#include "../cpu/variant_files.h"
#include "cuda_test_util.h"
#include "h3rt/hybrid.h"
#include "h3rt/pipeline.h"
#include "ops/attention/attention.h"
#include "ops/attention_sage/attention_sage_cuda.h"

namespace h3rt {
namespace {

using bf16 = __nv_bfloat16;

bool sage_runs() {
  const int cc = cuda::cuda_device_available() ? cuda::current_device_cc() : 0;
  return cc == 90 || cc == 120 || cc == 121;
}

#define H3RT_REQUIRE_SAGE()                                                                 \
  do {                                                                                      \
    H3RT_REQUIRE_GPU();                                                                     \
    if (!sage_runs()) GTEST_SKIP() << "Sage kernels are built for sm_90 / sm_120 / sm_121"; \
  } while (0)

// One QKV input [S, 3, H, 128] on the device and the buffers of sparse Sage calls on it.
struct SparseCall {
  int64_t S, H;
  Tensor qkv, out, sage_ws, router_ws;
  SparseAttention cfg;
  int64_t prefix;
  SparseCall(int64_t s, int64_t h, int64_t prefix_rows, std::mt19937_64& g)
      : S(s), H(h), prefix(prefix_rows) {
    qkv = test::upload(test::random_bf16(S * 3 * H * 128, g, 0.0f, 1.0f).bits, DType::bf16,
                       {S, 3 * H * 128});
    out = test::device_buffer(DType::bf16, {S, H * 128});
    const size_t sb = ops::attention_workspace_bytes(params(), ops::AttentionKernel::sage_8bit);
    sage_ws = test::device_buffer(DType::u8, {int64_t(sb)}, false);
    H3RT_CUDA_CHECK(cudaMemset(sage_ws.data(), 0, sb));
    router_ws = test::device_buffer(DType::u8,
                                    {int64_t(ops::attention_sparse_workspace_bytes(S, H))}, false);
    cfg.tau = 1.0f;
    cfg.band = 0;
  }
  ops::AttentionCudaParams params() const {
    ops::AttentionCudaParams p =
        ops::attention_params_from_qkv(qkv.ptr<const bf16>(), S, H, static_cast<bf16*>(out.data()));
    p.workspace = sage_ws.data();
    p.workspace_bytes = sage_ws.nbytes();
    return p;
  }
  // The output bits of a dense (sparse false) or sparse call; its parameters in `used`.
  std::vector<uint16_t> run(bool sparse, const uint8_t* dense_heads = nullptr,
                            ops::AttentionCudaParams* used = nullptr) {
    ops::AttentionCudaParams p = params();
    if (sparse) {
      p.sparse = &cfg;
      p.sparse_prefix_rows = prefix;
      p.sparse_workspace = router_ws.data();
      p.sparse_workspace_bytes = router_ws.nbytes();
      p.sparse_dense_heads = dense_heads;
    }
    H3RT_CUDA_CHECK(ops::attention_cuda(p, ops::AttentionKernel::sage_8bit, nullptr));
    if (used) *used = p;
    return test::download<uint16_t>(out);
  }
};

int64_t differing_rows(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                       int64_t width, int64_t col0, int64_t cols) {
  int64_t n = 0;
  for (size_t r = 0; r * width < a.size(); ++r)
    n += std::memcmp(&a[r * width + col0], &b[r * width + col0], cols * 2) != 0;
  return n;
}

// The check's dense rows and sums. Tolerance of the sums: both sides add the same bf16 values
// in double, only in another order (the GPU: 256 strided partials and a tree), so they agree to
// a relative ~n * 2^-53 (n ~ 1e5 terms: ~1e-11); 1e-9 leaves a margin and still fails on any
// wrong or missing element (one bf16 element of ~1e5 moves a sum by ~1e-5 relative).
TEST(SparseCheckCuda, DenseRowsAreDenseBitsAndSumsMatchTheHost) {
  H3RT_REQUIRE_SAGE();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  SparseCall x(1500, 3, 100, g);
  const int64_t I = x.H * 128, q_tile = ops::attention_sparse_query_tile();
  const int64_t nq = (x.S + q_tile - 1) / q_tile;
  const std::vector<uint16_t> dense = x.run(false);
  ops::AttentionCudaParams p;
  const std::vector<uint16_t> sparse = x.run(true, nullptr, &p);
  const std::vector<int32_t> tiles = {1, static_cast<int32_t>(nq / 2),
                                      static_cast<int32_t>(nq - 1)};
  const Tensor tiles_dev = test::upload(tiles, DType::i32, {3});
  Tensor dense_out = test::device_buffer(DType::bf16, {x.S, I});  // poisoned
  const std::vector<uint16_t> poison = test::download<uint16_t>(dense_out);
  const Tensor ws = test::device_buffer(
      DType::u8, {int64_t(ops::attention_sparse_check_workspace_bytes(x.S, x.H))}, false);
  Tensor sums = test::device_buffer(DType::f64, {x.H * 2});
  ops::SparseCheckCudaParams c;
  c.tiles = tiles_dev.ptr<const int32_t>();
  c.n_tiles = 3;
  c.dense_out = static_cast<bf16*>(dense_out.data());
  c.workspace = ws.data();
  c.workspace_bytes = ws.nbytes();
  c.sums = sums.ptr<double>();
  H3RT_CUDA_CHECK(ops::attention_sparse_check_cuda(p, c, nullptr));
  const std::vector<uint16_t> got = test::download<uint16_t>(dense_out);
  const std::vector<double> s = test::download<double>(sums);
  std::vector<char> sampled(x.S, 0);
  for (int32_t t : tiles)
    for (int64_t r = t * q_tile; r < std::min(x.S, (t + 1) * q_tile); ++r) sampled[r] = 1;
  int64_t wrong = 0;
  for (int64_t r = 0; r < x.S; ++r) {
    const std::vector<uint16_t>& want = sampled[r] ? dense : poison;
    wrong += std::memcmp(&got[r * I], &want[r * I], I * 2) != 0;
  }
  EXPECT_EQ(wrong, 0) << "sampled rows: the dense bits; other rows: untouched";
  for (int64_t h = 0; h < x.H; ++h) {
    double diff = 0, ref = 0;
    for (int64_t r = 0; r < x.S; ++r) {
      if (!sampled[r]) continue;
      for (int64_t d = 0; d < 128; ++d) {
        const int64_t e = r * I + h * 128 + d;
        const double a = bf16_to_f32(sparse[e]), b = bf16_to_f32(dense[e]);
        diff += std::fabs(a - b);
        ref += std::fabs(b);
      }
    }
    SCOPED_TRACE("head " + std::to_string(h));
    EXPECT_NEAR(s[2 * h], diff, 1e-9 * diff);
    EXPECT_NEAR(s[2 * h + 1], ref, 1e-9 * ref);
    const double e = sparse_check_rel_l1(s[2 * h], s[2 * h + 1]);
    std::printf("[ measured ] random Q/K, head %lld: sampled relative L1 %.4f\n",
                static_cast<long long>(h), e);
    EXPECT_GT(e, 0.0) << "tau 1 on random scores drops most key blocks";
  }
}

TEST(SparseCheckCuda, DenseHeadsGetTheDenseBits) {
  H3RT_REQUIRE_SAGE();
  std::mt19937_64 g(test::fresh_seed());
  SparseCall x(1200, 3, 0, g);
  const int64_t I = x.H * 128;
  const std::vector<uint16_t> dense = x.run(false), plain = x.run(true);
  const Tensor flags = test::upload(std::vector<uint8_t>{0, 1, 0}, DType::u8, {3});
  const std::vector<uint16_t> mixed = x.run(true, flags.ptr<const uint8_t>());
  EXPECT_GT(differing_rows(plain, dense, I, 128, 128), 0) << "head 1 was sparse";
  EXPECT_EQ(differing_rows(mixed, dense, I, 128, 128), 0) << "head 1 dense";
  EXPECT_EQ(differing_rows(mixed, plain, I, 0, 128), 0) << "head 0 as before";
  EXPECT_EQ(differing_rows(mixed, plain, I, 256, 128), 0) << "head 2 as before";
}

// ---- the sampling loop on the GPU (tiny preset, Sage attention) ----

// Sage on the GPU, with or without graphs.
test::DenseTwin* dense_twin(bool graphs) {
  DenoiserOptions o;
  o.device = Device::cuda;
  o.attention = Attention::sage;
  o.cuda_graphs = graphs;
  return new test::DenseTwin(o);
}

TEST(SparseCheckCuda, BoundZeroRunIsDenseFromTheTurnOnWithGraphs) {
  H3RT_REQUIRE_SAGE();
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "graphs" : "eager");
    std::unique_ptr<test::DenseTwin> twin(dense_twin(graphs));
    test::DenseTwin& d = *twin;
    const Request req = test::check_request(d.config());
    // Run 1, no check: its sparse steps capture the sparse graph (flags all zero).
    const SampleResult plain = sample(d, req, test::check_options(0, 0.05));
    EXPECT_EQ(d.same, (std::vector<bool>{true, false, false, false}));
    // Run 2, bound 0: step 1 checks (eagerly) and turns every head dense; steps 2 and 3 replay
    // the graph captured in run 1, reading the new flags: the dense bits.
    d.same.clear();
    const SampleResult checked = sample(d, req, test::check_options(10, 0.0));
    EXPECT_EQ(d.same, (std::vector<bool>{true, false, true, true}));
    const SparseCheckRecord& k = checked.hybrid_steps[1].check;
    ASSERT_TRUE(k.checked);
    const int64_t pairs = d.config().layers * d.config().heads;
    EXPECT_EQ(k.dense_heads, pairs);
    EXPECT_EQ(static_cast<int64_t>(k.rel_l1.size()), pairs);
    for (double e : k.rel_l1) EXPECT_TRUE(std::isfinite(e) && e > 0) << e;
    EXPECT_EQ(checked.hybrid_steps[2].sparse_fraction, 1.0);
    // Run 3, no check again: the flags go back to zero, the plain run's bits.
    d.same.clear();
    const SampleResult again = sample(d, req, test::check_options(0, 0.05));
    test::expect_same_bits(again.video_latents, plain.video_latents, "run 3 video");
    test::expect_same_bits(again.audio_latents, plain.audio_latents, "run 3 audio");
    // A bound no head reaches: measured, nothing changes.
    const SampleResult unreached = sample(d, req, test::check_options(2, 100.0));
    EXPECT_TRUE(unreached.hybrid_steps[1].check.checked && unreached.hybrid_steps[3].check.checked);
    EXPECT_EQ(unreached.hybrid_steps[3].check.dense_heads, 0);
    test::expect_same_bits(unreached.video_latents, plain.video_latents, "bound 100 video");
    test::expect_same_bits(unreached.audio_latents, plain.audio_latents, "bound 100 audio");
  }
}

}  // namespace
}  // namespace h3rt
