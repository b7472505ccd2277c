// GPU checks of block-sparse Sage attention: with every key block listed the sparse kernels
// (wgmma_pp3, w4) are bit-identical to dense; random lists against the CPU sparse reference; the
// GPU router chooses exactly the CPU router's blocks; smooth spatio-temporal Q/K (local
// attention) within a stated relative L1 of dense, prefix rows bit-identical; the CUDA forward
// session with sparse blocks (eager and graphs).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../cpu/sparse_test_util.h"
#include "cuda_test_util.h"
#include "h3rt/formats.h"
#include "h3rt/layout.h"
#include "h3rt/model.h"
#include "h3rt/nvfp4.h"
#include "model/forward_session_cuda.h"
#include "model/model_cuda.h"
#include "ops/attention_sage/attention_sage.h"
#include "ops/attention_sage/attention_sage_cuda.h"
#include "ops/attention_sparse/router.h"
#include "ops/attention_sparse/router_cuda.h"

namespace h3rt::attention_sparse {
namespace {

namespace as = attention_sage;
constexpr float kSmScale = 0.08838834764831845f;  // 1/sqrt(128)

bool sage_runs() {
  const int cc = cuda::cuda_device_available() ? cuda::current_device_cc() : 0;
  return cc == 90 || cc == 120 || cc == 121;
}
bool sm90() {
  return cuda::cuda_device_available() && cuda::current_device_cc() == 90;
}
std::vector<as::SageVariant> variants() {
  if (sm90()) return {as::SageVariant::w4, as::SageVariant::wgmma_pp3};
  return {as::SageVariant::w4};
}

// bf16 QKV rows [S][3*H*128] (bits) and their float values.
struct Qkv {
  int64_t seq, heads;
  std::vector<uint16_t> bits;
  std::vector<float> f;
  int64_t stride() const { return 3 * heads * 128; }
  as::QkvView view() const { return {bits.data(), seq, heads, stride()}; }
  RouterInput router_input() const {
    return {f.data(), f.data() + heads * 128, stride(), stride()};
  }
};

Qkv normal_qkv(int64_t S, int64_t H, std::mt19937_64& g) {
  Qkv x{S, H, {}, {}};
  const test::Bf16Data d = test::random_bf16(S * x.stride(), g, 0.0f, 1.0f);
  x.bits = d.bits;
  x.f = d.f;
  return x;
}

// Smooth spatio-temporal Q = K on a video grid (row = (t*16 + y)*16 + x): random Fourier
// features of the position, lengthscales (1.5, 2.5, 2.5), amplitude 12, so scores decay with
// distance (q.k*scale ~ 12.7 exp(-d^2/2)) and attention is local; V ~ N(0,1).
Qkv smooth_qkv(int64_t frames, int64_t H, std::mt19937_64& g) {
  const int64_t S = frames * 256;
  Qkv x{S, H, std::vector<uint16_t>(S * 3 * H * 128), std::vector<float>(S * 3 * H * 128)};
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::uniform_real_distribution<float> phase(0.0f, 6.2831853f);
  for (int64_t h = 0; h < H; ++h) {
    std::vector<float> w(128 * 3), b(128);
    for (int d = 0; d < 128; ++d) {
      w[3 * d] = n01(g) / 1.5f, w[3 * d + 1] = n01(g) / 2.5f, w[3 * d + 2] = n01(g) / 2.5f;
      b[d] = phase(g);
    }
    for (int64_t r = 0; r < S; ++r) {
      const float p[3] = {float(r / 256), float(r / 16 % 16), float(r % 16)};
      for (int d = 0; d < 128; ++d) {
        const float e =
            12.0f * 0.125f *
            std::cos(w[3 * d] * p[0] + w[3 * d + 1] * p[1] + w[3 * d + 2] * p[2] + b[d]);
        for (int part = 0; part < 3; ++part) {
          const float val = part < 2 ? e : n01(g);
          const int64_t i = r * x.stride() + (part * H + h) * 128 + d;
          x.bits[i] = f32_to_bf16(val);
          x.f[i] = bf16_to_f32(x.bits[i]);
        }
      }
    }
  }
  return x;
}

// One input on the device with its pre-pass done.
struct DeviceQkv {
  Tensor qkv, buf;
  as::SageBuffers b;
  DeviceQkv(const Qkv& x) {
    qkv = test::upload(x.bits, DType::bf16, {x.seq, x.stride()});
    const size_t bytes = as::sage_buffer_bytes(x.seq, x.heads);
    buf = test::device_buffer(DType::u8, {int64_t(bytes)}, false);
    H3RT_CUDA_CHECK(cudaMemset(buf.data(), 0, bytes));
    b = as::sage_buffers(buf.data(), x.seq, x.heads);
    H3RT_CUDA_CHECK(
        as::sage_prepass({qkv.data(), x.stride(), x.seq, x.heads, kSmScale, b}, nullptr));
  }
};

// Uploads host block lists (index and count) and returns the device view.
struct DeviceLists {
  Tensor index, count;
  BlockList view;
  explicit DeviceLists(const HostBlockLists& h) {
    index = test::upload(h.index, DType::i32, {int64_t(h.index.size())});
    count = test::upload(h.count, DType::i32, {int64_t(h.count.size())});
    view = h.view();
    view.index = index.ptr<const int32_t>();
    view.count = count.ptr<const int32_t>();
  }
};

// bf16 output bits [S][H*128] of one kernel call (dense without lists).
std::vector<uint16_t> run_sage(const Qkv& x, const DeviceQkv& d, as::SageVariant v,
                               const BlockList* lists) {
  const int64_t span = x.heads * 128;
  Tensor out = test::device_buffer(DType::bf16, {x.seq, span});
  as::SageAttentionParams p{d.b, x.seq, x.heads, out.data(), span, v};
  if (lists) p.blocks = *lists;
  H3RT_CUDA_CHECK(as::sage_attention(p, nullptr));
  std::vector<uint16_t> h(x.seq * span);
  H3RT_CUDA_CHECK(cudaMemcpy(h.data(), out.data(), h.size() * 2, cudaMemcpyDeviceToHost));
  return h;
}

// The NVFP4 encoding (given global scale) of one kernel call: qdata then scales, as bytes.
std::vector<uint8_t> run_sage_nvfp4(const Qkv& x, const DeviceQkv& d, as::SageVariant v,
                                    const BlockList* lists) {
  const int64_t span = x.heads * 128, qbytes = x.seq * span / 2;
  const int64_t sbytes = nvfp4_scales_bytes(x.seq, span);
  Tensor q = test::device_buffer(DType::u8, {qbytes}),
         sc = test::device_buffer(DType::u8, {sbytes});
  const Tensor g = test::upload(std::vector<float>{0.02f}, DType::f32, {1});
  as::SageAttentionParams p{d.b, x.seq, x.heads, nullptr, span, v};
  p.nvfp4.qdata = static_cast<uint8_t*>(q.data());
  p.nvfp4.scales = static_cast<uint8_t*>(sc.data());
  p.nvfp4.global_scale = g.ptr<float>();
  if (lists) p.blocks = *lists;
  H3RT_CUDA_CHECK(as::sage_attention(p, nullptr));
  std::vector<uint8_t> h(qbytes + sbytes);
  H3RT_CUDA_CHECK(cudaMemcpy(h.data(), q.data(), qbytes, cudaMemcpyDeviceToHost));
  H3RT_CUDA_CHECK(cudaMemcpy(h.data() + qbytes, sc.data(), sbytes, cudaMemcpyDeviceToHost));
  return h;
}

// The router on the device copy `qkv` of x.
RouterCudaParams router_params(const Qkv& x, const Tensor& qkv, const RouterShape& s,
                               const SparseAttention& cfg, const Tensor& ws) {
  RouterCudaParams p;
  p.q = qkv.ptr<const __nv_bfloat16>();
  p.k = p.q + x.heads * 128;
  p.q_row_stride = p.k_row_stride = x.stride();
  p.shape = s;
  p.cfg = cfg;
  p.workspace = ws.data();
  p.workspace_bytes = ws.nbytes();
  return p;
}

// Elements whose bits differ (-1: other sizes).
template <typename A, typename B>
int64_t differing(const A& a, const B& b) {
  if (a.size() != b.size()) return -1;
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(a[i])) != 0;
  return n;
}

RouterShape shape_for(const Qkv& x, as::SageVariant v, int64_t prefix = 0) {
  return {x.seq, x.heads, 128, as::sage_query_tile(v), prefix};
}

// std::mt19937_64 `g` from a fresh seed, recorded in the test's trace.
#define H3RT_FRESH_RNG(g)                           \
  const uint64_t g##_seed = test::fresh_seed();     \
  SCOPED_TRACE("seed " + std::to_string(g##_seed)); \
  std::mt19937_64 g(g##_seed)

class SparseSageCuda : public testing::Test {
 protected:
  void SetUp() override {
    H3RT_REQUIRE_GPU();
    if (!sage_runs()) GTEST_SKIP() << "Sage kernels are built for sm_90 / sm_120 / sm_121";
  }
};

TEST_F(SparseSageCuda, FullListsBitIdenticalToDense) {
  H3RT_FRESH_RNG(g);
  // Ragged and tiny S; 130 x 3 heads: pp3's 192-row tiles reach past the padded length; 2000:
  // the KV ring wraps.
  for (auto [S, H] :
       std::vector<std::pair<int64_t, int64_t>>{{1000, 2}, {130, 3}, {77, 1}, {2000, 1}}) {
    const Qkv x = normal_qkv(S, H, g);
    const DeviceQkv d(x);
    for (as::SageVariant v : variants()) {
      SCOPED_TRACE(testing::Message()
                   << "S=" << S << " H=" << H << " " << as::sage_variant_name(v));
      const DeviceLists full(full_block_lists(shape_for(x, v)));
      EXPECT_EQ(differing(run_sage(x, d, v, &full.view), run_sage(x, d, v, nullptr)), 0);
      // The NVFP4 epilogue (the out_proj input of the block) is its own sparse instantiation.
      EXPECT_EQ(differing(run_sage_nvfp4(x, d, v, &full.view), run_sage_nvfp4(x, d, v, nullptr)),
                0);
    }
  }
}

// Random non-empty ascending lists against the CPU sparse Sage reference; the tolerance of the
// dense kernel test (test_attention_sage.cu: rel L2 <= 4e-3 against the CPU Sage reference).
TEST_F(SparseSageCuda, RandomListsMatchTheCpuSparseReference) {
  H3RT_FRESH_RNG(g);
  const Qkv x = normal_qkv(900, 2, g);
  const DeviceQkv d(x);
  const as::Quantized z = as::quantize_reference(x.view(), kSmScale);
  for (as::SageVariant v : variants()) {
    SCOPED_TRACE(as::sage_variant_name(v));
    const HostBlockLists h = test::random_block_lists(shape_for(x, v), g);
    const DeviceLists dl(h);
    const BlockList hv = h.view();
    const std::vector<float> ref = as::attention_reference(z, as::RowSum::p8, &hv);
    const std::vector<uint16_t> got = run_sage(x, d, v, &dl.view);
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double o = bf16_to_f32(got[i]);
      ASSERT_TRUE(std::isfinite(o)) << "element " << i;
      num += (o - ref[i]) * (o - ref[i]);
      den += double(ref[i]) * ref[i];
    }
    // 8e-3 (both kernels sum the P8 row sums, RowSum::p8): the rows here visit 1 to 8 of 8 key
    // blocks, so the e4m3 rounding of P (in numerator and denominator) averages over fewer keys
    // than in the dense test, where pp3 measures 1.7e-3; one fresh seed gave 5.0e-3 here with
    // pp3 (session 11).
    EXPECT_LE(std::sqrt(num / den), 8e-3);  // both kernels: RowSum::p8
  }
}

std::vector<int32_t> device_ints(const int32_t* p, size_t n) {
  std::vector<int32_t> h(n);
  H3RT_CUDA_CHECK(cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost));
  return h;
}

// The GPU router's lists, counts and stats equal route_cpu's on the same bf16 values.
void expect_router_matches(const Qkv& x, const RouterShape& s, const SparseAttention& cfg) {
  SCOPED_TRACE(testing::Message() << "S=" << s.seq << " H=" << s.heads << " tile=" << s.q_tile
                                  << " prefix=" << s.prefix_rows << " tau=" << cfg.tau
                                  << " band=" << cfg.band << " max=" << cfg.max_blocks
                                  << " video_rows_only=" << cfg.video_rows_only);
  const HostBlockLists want = route_cpu(x.router_input(), s, cfg);
  const Tensor qkv = test::upload(x.bits, DType::bf16, {x.seq, x.stride()});
  const Tensor ws = test::device_buffer(DType::u8, {int64_t(router_workspace_bytes(s))});
  const Tensor stats = test::device_buffer(DType::u8, {16}, false);
  H3RT_CUDA_CHECK(cudaMemset(stats.data(), 0, 16));
  RouterCudaParams p = router_params(x, qkv, s, cfg, ws);
  p.stats = static_cast<unsigned long long*>(stats.data());
  H3RT_CUDA_CHECK(route_cuda(p, nullptr));
  const BlockList got = router_lists(ws.data(), s);
  const std::vector<int32_t> count = device_ints(got.count, want.count.size());
  const std::vector<int32_t> index = device_ints(got.index, want.index.size());
  ASSERT_EQ(count, want.count);
  const int64_t nk = s.n_kblocks();
  int64_t differ = 0;
  for (size_t t = 0; t < count.size(); ++t)
    for (int32_t c = 0; c < count[t]; ++c) differ += index[t * nk + c] != want.index[t * nk + c];
  EXPECT_EQ(differ, 0);
  unsigned long long n[2];
  H3RT_CUDA_CHECK(cudaMemcpy(n, stats.data(), 16, cudaMemcpyDeviceToHost));
  EXPECT_EQ(int64_t(n[0]), want.stats.key_blocks_computed);
  EXPECT_EQ(int64_t(n[1]), want.stats.key_blocks_total);
}

SparseAttention config(float tau, int band, int64_t max_blocks, bool video_rows_only) {
  return test::sparse_config(tau, band, max_blocks, video_rows_only);
}

TEST(SparseRouterCuda, ChoosesTheCpuRoutersBlocks) {
  H3RT_REQUIRE_GPU();
  H3RT_FRESH_RNG(g);
  const Qkv a = normal_qkv(3000, 2, g);
  for (int64_t tile : {192, 64}) {
    expect_router_matches(a, {a.seq, a.heads, 128, tile, 0}, config(1.0f, 1, 0, true));
    expect_router_matches(a, {a.seq, a.heads, 128, tile, 300}, config(0.5f, 0, 3, true));
    expect_router_matches(a, {a.seq, a.heads, 128, tile, 300}, config(1.3f, 2, 0, false));
  }
  const Qkv b = smooth_qkv(4, 2, g);  // structured scores
  expect_router_matches(b, {b.seq, b.heads, 128, 192, 100}, config(1.0f, 1, 4, true));
  const Qkv c = normal_qkv(77, 1, g);  // one key block
  expect_router_matches(c, {c.seq, c.heads, 128, 192, 0}, config(1.0f, 1, 0, true));
}

// Local attention (smooth Q = K on a 16 x 16 x 8 grid, 2048 rows, 16 key blocks): router +
// sparse kernel against the dense kernel, tau 1, band 1. The CPU references of the same
// computation (route_cpu + attention_reference) measured, for fixed seeds of this generator, a
// relative L1 of 0.038 / 0.042 / 0.033 (seeds 1, 3, 4) with 192-row tiles (pp3) at 51% of the
// key blocks, and 0.019 with 64-row tiles (w4, seed 2) at 49%; the bound 0.1 leaves a ~2x
// margin. Rows of the 200-row prefix are computed densely (video_rows_only) and must be
// bit-identical.
TEST_F(SparseSageCuda, SmoothLocalAttentionNearDenseAndPrefixRowsExact) {
  H3RT_FRESH_RNG(g);
  const Qkv x = smooth_qkv(8, 2, g);
  const DeviceQkv d(x);
  for (as::SageVariant v : variants()) {
    SCOPED_TRACE(as::sage_variant_name(v));
    const RouterShape s = shape_for(x, v, 200);
    const SparseAttention cfg = config(1.0f, 1, 0, true);
    const Tensor ws = test::device_buffer(DType::u8, {int64_t(router_workspace_bytes(s))});
    H3RT_CUDA_CHECK(route_cuda(router_params(x, d.qkv, s, cfg, ws), nullptr));
    const BlockList lists = router_lists(ws.data(), s);
    const std::vector<uint16_t> sparse = run_sage(x, d, v, &lists),
                                dense = run_sage(x, d, v, nullptr);
    const HostBlockLists cpu = route_cpu(x.router_input(), s, cfg);
    const int64_t span = x.heads * 128;
    double l1 = 0, ref = 0;
    int64_t prefix_differ = 0;
    for (int64_t i = 0; i < x.seq * span; ++i) {
      const double a = bf16_to_f32(sparse[i]), b = bf16_to_f32(dense[i]);
      l1 += std::fabs(a - b);
      ref += std::fabs(b);
      if (i / span < 200) prefix_differ += sparse[i] != dense[i];
    }
    std::printf("[ measured ] smooth Q/K, %s: %.1f%% of key blocks, rel L1 vs dense %.4f\n",
                as::sage_variant_name(v), 100.0 * cpu.stats.fraction(), l1 / ref);
    EXPECT_EQ(prefix_differ, 0);
    EXPECT_LE(cpu.stats.fraction(), 0.6);
    EXPECT_LE(l1 / ref, 0.1);
  }
}

// ---- the CUDA forward session ----

struct TinyInputs {
  SequenceLayout layout = make_t2va_layout(8, 4, 9, 16, 16);  // S = 592: 5 key blocks
  std::vector<float> video, audio, text;
  TinyInputs(const H3Config& c, std::mt19937_64& g) {
    std::normal_distribution<float> n01(0.0f, 1.0f);
    for (int64_t i = 0; i < layout.video_rows() * c.video_features(); ++i) video.push_back(n01(g));
    for (int64_t i = 0; i < layout.audio_rows() * c.audio_channels; ++i) audio.push_back(n01(g));
    for (int64_t i = 0; i < layout.text_len * c.text_dim; ++i) text.push_back(round_bf16(n01(g)));
  }
};

TEST_F(SparseSageCuda, ForwardSessionRunsSparseEagerAndFromGraphs) {
  H3RT_FRESH_RNG(g);
  const H3Config c = H3Config::tiny();
  const model::DeviceModel dev = model::make_synthetic_device_model(c, g_seed);
  const TinyInputs x(c, g);
  const TimestepPlan plan = make_timestep_plan(x.layout, 0.6f, 0.6f);
  model::ForwardSessionOptions o;
  o.attention = ops::AttentionKernel::sage_8bit;
  model::ForwardSessionCuda session(dev, x.layout, o);
  ForwardInputs in{x.layout, plan, x.video.data(), x.audio.data(), x.text.data()};
  const ForwardOutputs dense = session.forward(in);
  SparseAttention s = config(0.5f, 0, 0, true);
  s.dense_blocks = static_cast<int>(c.layers);  // every block dense: the dense output
  in.sparse = &s;
  EXPECT_EQ(differing(session.forward(in).video_velocity, dense.video_velocity), 0);
  s.dense_blocks = 1;
  SparseStats st[3];
  std::vector<FloatVec> out;
  for (int i = 0; i < 3; ++i) {  // eager (first sparse step), then captured and replayed
    in.sparse_stats = &st[i];
    out.push_back(session.forward(in).video_velocity);
  }
  const int64_t S = x.layout.seq_len();
  const int64_t tile = as::sage_query_tile(as::sage_resolve_variant(as::SageVariant::automatic));
  const int64_t nq = (S + tile - 1) / tile;
  EXPECT_EQ(st[0].key_blocks_total, (c.layers - 1) * c.heads * nq * ((S + 127) / 128));
  EXPECT_LE(st[0].key_blocks_computed, st[0].key_blocks_total);
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(differing(out[i], out[0]), 0) << "step " << i;
    EXPECT_EQ(st[i].key_blocks_computed, st[0].key_blocks_computed);
  }
  for (float v : out[0]) ASSERT_TRUE(std::isfinite(v));
  EXPECT_TRUE(session.last_times().graph);
}

TEST(SparseForwardCuda, Bf16AttentionRejectsSparse) {
  H3RT_REQUIRE_GPU();
  std::mt19937_64 g(3);
  const H3Config c = H3Config::tiny();
  const model::DeviceModel dev = model::make_synthetic_device_model(c, 3);
  const TinyInputs x(c, g);
  const TimestepPlan plan = make_timestep_plan(x.layout, 0.6f, 0.6f);
  model::ForwardSessionCuda session(dev, x.layout);
  ForwardInputs in{x.layout, plan, x.video.data(), x.audio.data(), x.text.data()};
  const SparseAttention s = config(1.0f, 1, 0, true);
  in.sparse = &s;
  try {
    session.forward(in);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs --attention sage"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace h3rt::attention_sparse
