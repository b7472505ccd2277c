// NVFP4 quantize kernels vs the host reference: bit-exact in IEEE mode for every global-scale
// source, on fresh random data and on the golden vectors; the fast-math mode within its
// documented difference.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "../cpu/test_util.h"
#include "cuda_test_util.h"
#include "formats/nvfp4_layout.h"
#include "formats/nvfp4_quantize.h"
#include "h3rt/nvfp4.h"

namespace h3rt {
namespace {

struct Case {
  int64_t rows, cols, ld;
};

// Random rows with per-row scales, a few all-zero blocks, tiny (subnormal-scale) blocks and one
// large outlier, so zero scales, subnormal e4m3 scales and saturation all occur.
test::Bf16Data make_input(const Case& c, std::mt19937_64& rng) {
  test::Bf16Data d = test::random_rows_bf16(c.rows, c.ld, rng);
  std::uniform_int_distribution<int64_t> row(0, c.rows - 1), blk(0, c.cols / 16 - 1);
  for (int k = 0; k < 8; ++k) {
    const int64_t r = row(rng), b = blk(rng);
    for (int i = 0; i < 16; ++i) {
      const int64_t at = r * c.ld + b * 16 + i;
      d.bits[at] = k < 4 ? 0 : f32_to_bf16(d.f[at] * 1e-4f);
      d.f[at] = bf16_to_f32(d.bits[at]);
    }
  }
  const int64_t at = row(rng) * c.ld + blk(rng) * 16;
  d.bits[at] = f32_to_bf16(3000.0f);
  d.f[at] = bf16_to_f32(d.bits[at]);
  return d;
}

struct Result {
  std::vector<uint8_t> qdata, scales;
  float g;
};

Result run_gpu(const Case& c, const test::Bf16Data& in, Nvfp4GlobalScaleSource src, float g_given,
               Nvfp4Math math, bool force_sw, Tensor* workspace) {
  Tensor x = test::upload(in.bits, DType::bf16, {c.rows, c.ld});
  Tensor q = test::device_buffer(DType::u8, {c.rows, c.cols / 2});
  Tensor s = test::device_buffer(DType::u8, {nvfp4_scales_bytes(c.rows, c.cols)});
  Tensor g = test::upload(std::vector<float>{src == Nvfp4GlobalScaleSource::kGiven ? g_given : NAN},
                          DType::f32, {1});
  Nvfp4QuantizeParams p;
  p.x = x.data();
  p.rows = c.rows;
  p.cols = c.cols;
  p.ld = c.ld;
  p.qdata = test::dptr<uint8_t>(q);
  p.scales = test::dptr<uint8_t>(s);
  p.global_scale = test::dptr<float>(g);
  p.source = src;
  p.rule = Nvfp4ScaleRule::kBf16Activation;
  p.math = math;
  p.force_software_cvt = force_sw;
  p.workspace = workspace ? workspace->data() : nullptr;
  H3RT_CUDA_CHECK(nvfp4_quantize(p, nullptr));
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  return {test::download<uint8_t>(q), test::download<uint8_t>(s), test::download<float>(g)[0]};
}

Result run_cpu(const Case& c, const test::Bf16Data& in, float g) {
  Tensor x(const_cast<uint16_t*>(in.bits.data()), DType::bf16, {c.rows, c.cols}, {c.ld, 1}, nullptr,
           Device::cpu);
  Nvfp4Tensor t = nvfp4_quantize(x, g);
  const uint8_t* q = t.qdata.ptr<uint8_t>();
  const uint8_t* s = t.scales.ptr<uint8_t>();
  return {{q, q + t.qdata.nbytes()}, {s, s + t.scales.nbytes()}, g};
}

size_t diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += a[i] != b[i];
  return n;
}

Tensor zeroed_workspace() {
  Tensor ws =
      test::device_buffer(DType::u8, {static_cast<int64_t>(nvfp4_quantize_workspace_bytes())});
  H3RT_CUDA_CHECK(cudaMemset(ws.data(), 0, ws.nbytes()));
  return ws;
}

const Case kCases[] = {
    {37, 5376, 5376}, {130, 7168, 7168}, {129, 14336, 14336}, {300, 48, 48},
    {1, 80, 80},      {257, 112, 120},   {4096, 5376, 5376},  {131, 5376, 5384},
};

TEST(Nvfp4Cuda, AllSourcesBitExactAgainstHostReference) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Tensor ws = zeroed_workspace();
  for (const Case& c : kCases) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " cols " + std::to_string(c.cols) + " ld " +
                 std::to_string(c.ld));
    const test::Bf16Data in = make_input(c, rng);
    Tensor xh(const_cast<uint16_t*>(in.bits.data()), DType::bf16, {c.rows, c.cols}, {c.ld, 1},
              nullptr, Device::cpu);
    const float g = nvfp4_global_scale(xh, Nvfp4ScaleRule::kBf16Activation);
    const Result want = run_cpu(c, in, g);
    for (bool force_sw : {false, true}) {
      for (auto src : {Nvfp4GlobalScaleSource::kGiven, Nvfp4GlobalScaleSource::kTwoPass,
                       Nvfp4GlobalScaleSource::kSingleLaunch}) {
        SCOPED_TRACE("source " + std::to_string(static_cast<int>(src)) + " sw " +
                     std::to_string(force_sw));
        // twice: the workspace must come back clean
        for (int rep = 0; rep < 2; ++rep) {
          const Result got = run_gpu(c, in, src, g, Nvfp4Math::kIeee, force_sw, &ws);
          EXPECT_EQ(std::bit_cast<uint32_t>(got.g), std::bit_cast<uint32_t>(g));
          EXPECT_EQ(diff(got.qdata, want.qdata), 0u);
          EXPECT_EQ(diff(got.scales, want.scales), 0u);
        }
      }
    }
  }
}

TEST(Nvfp4Cuda, F32RuleAndGivenScaleOnGoldenVectors) {
  H3RT_REQUIRE_GPU();
  const std::string dir = test::nvfp4_golden_dir();
  std::ifstream mf(dir + "/manifest.json");
  ASSERT_TRUE(mf.good()) << dir;
  nlohmann::json m = nlohmann::json::parse(mf);
  auto bytes = [&](const std::string& p) {
    std::ifstream f(dir + "/" + p, std::ios::binary);
    EXPECT_TRUE(f.good()) << p;
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
  };
  Tensor ws = zeroed_workspace();
  for (const auto& e : m["entries"]) {
    const std::string tag = e["tag"];
    const Case c{e["rows"], e["cols"], e["cols"]};
    std::vector<uint8_t> xb = bytes(tag + ".x.bf16");
    test::Bf16Data in;
    in.bits.resize(xb.size() / 2);
    std::memcpy(in.bits.data(), xb.data(), xb.size());
    const float g = e["per_tensor_scale"].get<float>();
    const Result got =
        run_gpu(c, in, Nvfp4GlobalScaleSource::kGiven, g, Nvfp4Math::kIeee, false, &ws);
    EXPECT_EQ(diff(got.qdata, bytes(tag + ".qdata.u8")), 0u) << tag;
    EXPECT_EQ(diff(got.scales, bytes(tag + ".scales.u8")), 0u) << tag;
    // the fp32 rule on the device reproduces the manifest's per_tensor_scale
    Tensor x = test::upload(in.bits, DType::bf16, {c.rows, c.cols});
    Tensor q = test::device_buffer(DType::u8, {c.rows, c.cols / 2});
    Tensor s = test::device_buffer(DType::u8, {nvfp4_scales_bytes(c.rows, c.cols)});
    Tensor gd = test::device_buffer(DType::f32, {1});
    Nvfp4QuantizeParams p;
    p.x = x.data();
    p.rows = c.rows;
    p.cols = p.ld = c.cols;
    p.qdata = test::dptr<uint8_t>(q);
    p.scales = test::dptr<uint8_t>(s);
    p.global_scale = test::dptr<float>(gd);
    p.source = Nvfp4GlobalScaleSource::kSingleLaunch;
    p.rule = Nvfp4ScaleRule::kF32Divide;
    p.workspace = ws.data();
    H3RT_CUDA_CHECK(nvfp4_quantize(p, nullptr));
    EXPECT_EQ(test::download<float>(gd)[0], g) << tag;
    EXPECT_EQ(diff(test::download<uint8_t>(q), bytes(tag + ".qdata.u8")), 0u) << tag;
  }
}

// Fast math: approximate divisions move a scale across an e4m3 rounding point only rarely, and
// the reciprocal-multiply moves element codes across e2m1 ties only rarely; every difference is
// one step of the respective format. Blocks with scale 0 are skipped: there the fast formula
// multiplies by FLT_MAX (codes +-6 for nonzero values) where the reference writes +0.
TEST(Nvfp4Cuda, FastMathStaysWithinOneStepOfIeee) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Case c{2048, 5376, 5376};
  const test::Bf16Data in = make_input(c, rng);
  Tensor xh(const_cast<uint16_t*>(in.bits.data()), DType::bf16, {c.rows, c.cols});
  const float g = nvfp4_global_scale(xh, Nvfp4ScaleRule::kBf16Activation);
  const Result want = run_cpu(c, in, g);
  const Result got =
      run_gpu(c, in, Nvfp4GlobalScaleSource::kGiven, g, Nvfp4Math::kFastMath, false, nullptr);
  size_t scale_diff = 0, code_diff = 0;
  const int64_t kb = c.cols / 16;
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t b = 0; b < kb; ++b) {
      const int64_t o = nvfp4::scale_offset(r, b, kb);
      const uint8_t sw = want.scales[o], sg = got.scales[o];
      if (sw == 0 && sg == 0) continue;
      if (sw != sg) {
        ++scale_diff;
        EXPECT_EQ(std::abs(int(sw) - int(sg)), 1) << "row " << r << " block " << b;
        continue;
      }
      for (int i = 0; i < 8; ++i) {
        const uint8_t qw = want.qdata[r * c.cols / 2 + b * 8 + i];
        const uint8_t qg = got.qdata[r * c.cols / 2 + b * 8 + i];
        for (int sh : {0, 4}) {
          const uint8_t a = (qw >> sh) & 0xf, d = (qg >> sh) & 0xf;
          if (a == d) continue;
          ++code_diff;
          // one code step, same sign (or +-0 of a tiny value)
          EXPECT_LE(std::abs(int(a & 7) - int(d & 7)), 1) << "row " << r << " block " << b;
        }
      }
    }
  const double blocks = double(c.rows) * kb, elems = double(c.rows) * c.cols;
  EXPECT_LE(scale_diff, blocks * 1e-4) << scale_diff << " of " << blocks << " scales differ";
  EXPECT_LE(code_diff, elems * 1e-4) << code_diff << " of " << elems << " codes differ";
  std::printf("fast-math vs IEEE: %zu of %.0f scales, %zu of %.0f codes differ\n", scale_diff,
              blocks, code_diff, elems);
}

TEST(Nvfp4Cuda, RejectsBadParameters) {
  H3RT_REQUIRE_GPU();
  Nvfp4QuantizeParams p;
  p.rows = 4;
  p.cols = 24;  // not a multiple of 16
  EXPECT_EQ(nvfp4_quantize(p, nullptr), cudaErrorInvalidValue);
  p.cols = 32;
  p.ld = 32;  // null pointers
  EXPECT_EQ(nvfp4_quantize(p, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace h3rt
