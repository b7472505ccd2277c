// Producers with an int8 convrot output (ops/int8_linear/int8_fused.h): rmsnorm_modulate (with
// and without the fused residual) and the swiglu table path rotate and quantize their own rows,
// and q, scale (and the bf16 output written alongside, and the residual stream) must be
// bit-identical to the unfused pipeline "producer writes bf16, then int8_quantize_rows_cuda" on
// fresh random data, at the release widths (5376 and 14336, G = 256) and the tiny model's
// (G = 16, 64), ragged rows. One case per producer also checks the fused bytes against the host
// reference (h3rt::int8_quantize_rows of the bf16 output).
// The rotation's two forms (Int8RotateMath: double, integer) are forced in turn, on modulated
// rows and on plain-RMSNorm rows crafted to reach the integer form's fallback (exponents spanning
// 2^-120..2^10), all-zero rows and subnormal outputs; the units that fell back are counted.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "h3rt/formats.h"
#include "h3rt/int8.h"
#include "int8_rotate_test_util.h"
#include "norm_test_util.h"
#include "ops/int8_linear/int8_linear.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"
#include "swiglu_test_util.h"

namespace h3rt {
namespace {

using test::dptr;

// q and scale of an int8 output on the device.
struct Q8 {
  Tensor q, scale;
  Q8(int64_t rows, int64_t cols)
      : q(test::device_buffer(DType::i8, {rows, cols})),
        scale(test::device_buffer(DType::f32, {rows})) {}
  ops::Int8Out out(int group, ops::Int8RotateMath rotate = ops::Int8RotateMath::kAuto,
                   uint32_t* tiers = nullptr) const {
    ops::Int8Out o;
    o.q = dptr<int8_t>(q);
    o.scale = dptr<float>(scale);
    o.group = group;
    o.rotate = rotate;
    o.rotate_tiers = tiers;
    return o;
  }
};

// The unfused pipeline's second half: the standalone quantizer on the bf16 output (the double
// rotation form).
Q8 quantize_unfused(const Tensor& y, int64_t rows, int64_t cols, int group) {
  Q8 r(rows, cols);
  ops::Int8QuantizeCudaParams p;
  p.x = dptr<__nv_bfloat16>(y);
  p.q = dptr<int8_t>(r.q);
  p.scale = dptr<float>(r.scale);
  p.rows = rows;
  p.k = cols;
  p.group = group;
  p.rotate = ops::Int8RotateMath::kDouble;
  H3RT_CUDA_CHECK(ops::int8_quantize_rows_cuda(p, nullptr));
  return r;
}

// The fused bytes against the host rule applied to the bf16 output y.
void expect_host_rule(const Q8& fused, const Tensor& y, int64_t rows, int64_t cols, int group) {
  Tensor host = Tensor::zeros(DType::bf16, {rows, cols});
  const auto bits = test::download<uint16_t>(y);
  std::memcpy(host.data(), bits.data(), bits.size() * 2);
  const Int8Rows want = int8_quantize_rows(host, group);
  const auto q = test::download<int8_t>(fused.q);
  const auto s = test::download<float>(fused.scale);
  EXPECT_EQ(std::memcmp(q.data(), want.q.data(), q.size()), 0) << "q differs from the host rule";
  EXPECT_EQ(std::memcmp(s.data(), want.scale.data(), s.size() * 4), 0)
      << "scale differs from the host rule";
}

struct NormCase {
  int64_t rows, dim;
  int group;
  bool residual, with_y, host_check = false;
  ops::Int8RotateMath rotate = ops::Int8RotateMath::kAuto;
  bool crafted = false;  // plain RMSNorm (no modulation) of crafted_rows
};

// Row kinds, cycling: ordinary, exponents over 2^-120..2^10 (the integer form falls back), all
// zero, tiny (2^-133..2^-118: subnormal outputs), 1024-column stretches alternately narrow and
// wide, with -0 in every 5th column, and exponents over 2^-22..2^10 (the int64 tier).
std::vector<uint16_t> crafted_rows(int64_t rows, int64_t dim, std::mt19937_64& g) {
  std::vector<uint16_t> x = test::random_rows_bf16(rows, dim, g).bits;
  std::uniform_real_distribution<float> wide(-120.0f, 10.0f), tiny(-133.0f, -118.0f),
      narrow(-3.0f, 3.0f), medium(-22.0f, 10.0f);
  std::bernoulli_distribution sign(0.5);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < dim; ++j) {
      const float s = sign(g) ? -1.0f : 1.0f;
      uint16_t& v = x[r * dim + j];
      switch (r % 6) {
        case 1:
          v = f32_to_bf16(s * std::exp2(wide(g)));
          break;
        case 2:
          v = 0;
          break;
        case 3:
          v = f32_to_bf16(s * std::exp2(tiny(g)));
          break;
        case 4:
          v = j % 5 == 0 ? 0x8000
                         : f32_to_bf16(s * std::exp2((j / 1024) % 2 ? wide(g) : narrow(g)));
          break;
        case 5:
          v = f32_to_bf16(s * std::exp2(medium(g)));
          break;
        default:
          break;
      }
    }
  return x;
}

// The units the integer form rotated in double and in int64 must be exactly those the host
// predicts from the bf16 values (none for the double form); returns that prediction.
bool integer_form(ops::Int8RotateMath rotate) {
  return (rotate == ops::Int8RotateMath::kAuto ? ops::int8_rotate_auto_math() : rotate) ==
         ops::Int8RotateMath::kInteger;
}

test::RotateTiers expect_tiers(const Tensor& tiers, const Tensor& y, int64_t rows, int64_t cols,
                               int group, ops::Int8RotateMath rotate) {
  const test::RotateTiers want =
      integer_form(rotate) ? test::expected_rotate_tiers(test::download<uint16_t>(y), rows, cols,
                                                         cols, group, ops::int8_rotate_int64_tier())
                           : test::RotateTiers{};
  const std::vector<int32_t> got = test::download<int32_t>(tiers);
  EXPECT_EQ(int64_t(got[0]), want.double_units) << "units rotated in double by the integer form";
  EXPECT_EQ(int64_t(got[1]), want.int64_units) << "units rotated in int64 by the integer form";
  return want;
}

void run_norm(const NormCase& c) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " rows " << c.rows << " dim " << c.dim
                                  << " group " << c.group << " residual " << c.residual
                                  << " rotate " << ops::int8_rotate_math_name(c.rotate)
                                  << (c.crafted ? " crafted rows" : ""));
  H3RT_REQUIRE_GPU();
  ASSERT_TRUE(ops::rmsnorm_modulate_int8_fusable(c.dim, c.group));
  std::mt19937_64 g(seed);
  const int64_t rows = c.rows, dim = c.dim;
  const std::vector<uint16_t> xh =
      c.crafted ? crafted_rows(rows, dim, g) : test::random_rows_bf16(rows, dim, g).bits;
  const test::NormInputs in(xh, rows, dim, g, seed);
  Tensor y_ref = test::device_buffer(DType::bf16, {rows, dim});
  Tensor y_fused = test::device_buffer(DType::bf16, {rows, dim});

  ops::RmsNormModulateCudaParams p = in.params(c.residual);
  if (c.crafted) p.shift = p.scale = nullptr;  // the modulation's shift would hide the spans
  ops::RmsNormModulateCudaParams pr = p;
  pr.x = dptr<__nv_bfloat16>(in.x_ref);
  pr.y = dptr<__nv_bfloat16>(y_ref);
  H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(pr, nullptr));
  const Q8 ref = quantize_unfused(y_ref, rows, dim, c.group);

  Q8 fused(rows, dim);
  ops::RmsNormModulateCudaParams pf = p;
  pf.x = dptr<__nv_bfloat16>(in.x_fused);
  pf.y = c.with_y ? dptr<__nv_bfloat16>(y_fused) : nullptr;
  Tensor tiers = test::upload(std::vector<int32_t>{0, 0}, DType::i32, {2});
  pf.int8 = fused.out(c.group, c.rotate, dptr<uint32_t>(tiers));
  H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(pf, nullptr));
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  const test::RotateTiers want_tiers = expect_tiers(tiers, y_ref, rows, dim, c.group, c.rotate);
  if (c.crafted && integer_form(c.rotate) && rows >= 6) {
    EXPECT_GT(want_tiers.double_units, 0) << "the crafted wide rows must reach the fallback";
    if (ops::int8_rotate_int64_tier())
      EXPECT_GT(want_tiers.int64_units, 0) << "the medium rows must take int64";
  }
  test::expect_same_bytes(fused.q, ref.q, "q");
  test::expect_same_bytes(fused.scale, ref.scale, "scale");
  if (c.residual) test::expect_same_bytes(in.x_fused, in.x_ref, "residual stream x");
  if (c.with_y) test::expect_same_bytes(y_fused, y_ref, "bf16 y written alongside");
  if (c.host_check) expect_host_rule(fused, y_ref, rows, dim, c.group);
}

TEST(FusedInt8, RmsNormModulateReleaseWidth) {
  run_norm({1000, 5376, 256, false, false, true});
  run_norm({37, 5376, 256, false, true});
}
TEST(FusedInt8, ResidualRmsNormModulateReleaseWidth) {
  run_norm({1000, 5376, 256, true, false});
  run_norm({15399, 5376, 256, true, true});
}
TEST(FusedInt8, RmsNormModulateTinyGroups) {
  for (bool residual : {false, true}) {
    run_norm({300, 192, 16, residual, true});
    run_norm({77, 384, 64, residual, false});
    run_norm({129, 256, 64, residual, false});
    run_norm({5, 6144, 256, residual, true});  // the widest the fused kernel takes
  }
}

// Both rotation forms forced (and kAuto, the device's default), G = 16, 64, 256, the widths the
// fused kernel takes, ragged rows; modulated rows (with and without the residual) and crafted
// plain-norm rows (fallback units, zero rows, subnormal outputs); the host rule checked too.
TEST(FusedInt8, IntegerRotationBitExact) {
  for (ops::Int8RotateMath math :
       {ops::Int8RotateMath::kDouble, ops::Int8RotateMath::kInteger, ops::Int8RotateMath::kAuto})
    for (int group : {16, 64, 256})
      for (int64_t dim : {256, 1024, 5376}) {
        run_norm({37, dim, group, false, false, true, math, true});
        run_norm({300, dim, group, true, false, true, math});
        run_norm({1, dim, group, false, true, true, math, true});
        run_norm({130, dim, group, false, false, false, math});
      }
}

struct SwigluCase {
  int64_t rows, ffn;
  int group;
  bool with_y, host_check = false;
  ops::Int8RotateMath rotate = ops::Int8RotateMath::kAuto;
  bool crafted = false;  // fc1 rows from crafted_rows: wide spans, zeros, subnormal products
};

void run_swiglu(const SwigluCase& c) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " rows " << c.rows << " ffn " << c.ffn
                                  << " group " << c.group << " rotate "
                                  << ops::int8_rotate_math_name(c.rotate)
                                  << (c.crafted ? " crafted rows" : ""));
  H3RT_REQUIRE_GPU();
  ASSERT_TRUE(ops::swiglu_int8_fusable(c.ffn, c.group));
  std::mt19937_64 g(seed);
  const int64_t rows = c.rows, f = c.ffn;
  const std::vector<uint16_t> xh =
      c.crafted ? crafted_rows(rows, 2 * f, g) : test::random_rows_bf16(rows, 2 * f, g).bits;
  Tensor in = test::upload(xh, DType::bf16, {rows, 2 * f});
  Tensor y_ref = test::device_buffer(DType::bf16, {rows, f});
  Tensor y_fused = test::device_buffer(DType::bf16, {rows, f});
  const Tensor silu = test::silu_table_on_gpu();
  ops::SwigluCudaParams p;
  p.in = dptr<__nv_bfloat16>(in);
  p.rows = rows;
  p.ffn = f;
  p.silu_table = dptr<__nv_bfloat16>(silu);  // the unfused run takes the table path, as the block
  ops::SwigluCudaParams pr = p;
  pr.out = dptr<__nv_bfloat16>(y_ref);
  H3RT_CUDA_CHECK(ops::swiglu_cuda(pr, nullptr));
  const Q8 ref = quantize_unfused(y_ref, rows, f, c.group);

  Q8 fused(rows, f);
  ops::SwigluCudaParams pf = p;
  pf.out = c.with_y ? dptr<__nv_bfloat16>(y_fused) : nullptr;
  Tensor tiers = test::upload(std::vector<int32_t>{0, 0}, DType::i32, {2});
  pf.int8 = fused.out(c.group, c.rotate, dptr<uint32_t>(tiers));
  H3RT_CUDA_CHECK(ops::swiglu_cuda(pf, nullptr));
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  expect_tiers(tiers, y_ref, rows, f, c.group, c.rotate);
  test::expect_same_bytes(fused.q, ref.q, "q");
  test::expect_same_bytes(fused.scale, ref.scale, "scale");
  if (c.with_y) test::expect_same_bytes(y_fused, y_ref, "bf16 out written alongside");
  if (c.host_check) expect_host_rule(fused, y_ref, rows, f, c.group);
}

// The release width (more rows than CTAs, so each CTA walks several rows and prefetches), the
// tiny model's groups and widths, ragged rows, a row count below the grid.
TEST(FusedInt8, SwigluReleaseWidth) {
  run_swiglu({1000, 14336, 256, false, true});
  run_swiglu({4000, 14336, 256, true});
  run_swiglu({3, 14336, 256, true, true});
}
TEST(FusedInt8, SwigluTinyGroups) {
  run_swiglu({300, 384, 16, true});
  run_swiglu({77, 768, 64, false});
  run_swiglu({129, 256, 256, true, true});
  run_swiglu({5, 15360, 256, false});  // the widest with the whole table at G 256 (15 warps)
  run_swiglu({7, 16384, 16, true});    // the widest at all (16 warps, no transpose tiles)
}
// The compact silu table (silu_table.h): taken by itself where the whole table leaves too little
// shared memory (ffn 16384 at G 256 on Hopper), and forced everywhere by H3RT_SWIGLU_TABLE, as on
// the GPUs with 99 KB per block (sm_120 / sm_121, whose kernels never run here).
TEST(FusedInt8, SwigluCompactTable) {
  run_swiglu({5, 16384, 256, true, true});
  const test::ForcedCompactSiluTable forced;
  run_swiglu({1000, 14336, 256, false, true});
  run_swiglu({300, 384, 16, true});
  run_swiglu({77, 768, 64, false, true});
  run_swiglu({130, 1024, 256, false, true, ops::Int8RotateMath::kDouble, true});
}

// Both rotation forms forced on random and crafted fc1 rows (fallback units, zero and subnormal
// products); the host rule checked too.
TEST(FusedInt8, SwigluIntegerRotationBitExact) {
  for (ops::Int8RotateMath math : {ops::Int8RotateMath::kDouble, ops::Int8RotateMath::kInteger})
    for (int group : {16, 64, 256}) {
      run_swiglu({130, 1024, group, false, true, math, true});
      run_swiglu({300, 14336, group, true, false, math});
    }
}

// What the fused paths refuse: the fusable predicates and the launchers' checks agree.
TEST(FusedInt8, RefusesWhatItCannotTake) {
  H3RT_REQUIRE_GPU();
  EXPECT_FALSE(ops::rmsnorm_modulate_int8_fusable(5376, 4));         // group 4: unfused
  EXPECT_FALSE(ops::rmsnorm_modulate_int8_fusable(5376, 0));         // plain per-row int8: unfused
  EXPECT_FALSE(ops::rmsnorm_modulate_int8_fusable(8192, 256));       // wider than one CTA's row
  EXPECT_FALSE(ops::rmsnorm_modulate_int8_fusable(5376 + 16, 256));  // group does not divide
  EXPECT_FALSE(ops::swiglu_int8_fusable(14336 + 64, 256));           // group does not divide
  EXPECT_FALSE(ops::swiglu_int8_fusable(14336, 4));                  // group 4: unfused
  EXPECT_FALSE(ops::swiglu_int8_fusable(16384 + 256, 256));          // more than 4 vectors/thread
  Q8 q(4, 8192);
  Tensor x = test::device_buffer(DType::bf16, {4, 8192});
  ops::RmsNormModulateCudaParams p;
  p.x = dptr<__nv_bfloat16>(x);
  p.rows = 4;
  p.dim = 8192;
  p.int8 = q.out(256);
  EXPECT_THROW(ops::rmsnorm_modulate_cuda(p, nullptr), Error);
  ops::SwigluCudaParams sw;  // no silu table: the int8 output needs it
  sw.in = dptr<__nv_bfloat16>(x);
  sw.rows = 2;
  sw.ffn = 4096;
  sw.int8 = q.out(256);
  EXPECT_THROW(ops::swiglu_cuda(sw, nullptr), Error);
}

}  // namespace
}  // namespace h3rt
