// int8 W8A8 on the GPU (ops/int8_linear): the rotate+quantize kernels (team, block register and
// shared-memory, each forced where the dispatcher would pick another) bit-identical to
// h3rt::int8_quantize_rows (fresh random rows with outliers spanning 2^-20..2^12 inside a group,
// exponents spanning 2^-133..2^100, all-zero rows, tiny and subnormal values, strided and
// misaligned rows; the padding of q rows left alone), the int8 GEMM on every path and every
// CUTLASS config this build and device offer bit-identical to h3rt::int8_linear (ragged M and N,
// with and without bias, strided x and y), the dispatcher's refusal / fallback on misaligned
// operands, and the golden int8_convrot vectors byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../cpu/test_util.h"
#include "cuda_test_util.h"
#include "h3rt/formats.h"
#include "h3rt/int8.h"
#include "h3rt/safetensors.h"
#include "int8_rotate_test_util.h"
#include "ops/int8_linear/int8_linear.h"

namespace h3rt {
namespace {

using ops::Int8CutlassConfig;
using ops::Int8GemmPath;
using ops::Int8QuantizePath;

// Index of the first differing byte of two equal-sized buffers, -1 when identical; *count gets
// the number of differing bytes.
int64_t first_diff(const void* a, const void* b, size_t n, int64_t* count) {
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto* pb = static_cast<const uint8_t*>(b);
  int64_t first = -1;
  *count = 0;
  for (size_t i = 0; i < n; ++i)
    if (pa[i] != pb[i] && (*count)++ == 0) first = static_cast<int64_t>(i);
  return first;
}

// ---- the quantizer --------------------------------------------------------------------------

struct QCase {
  int64_t rows, k;
  int group;
  int64_t x_ld, q_ld;
  bool force_generic;
  Int8QuantizePath path = Int8QuantizePath::kAuto;
  ops::Int8RotateMath rotate = ops::Int8RotateMath::kAuto;
};

// Row kinds, cycling: ordinary, outliers over 2^-20..2^12, all zero, tiny (down to subnormal),
// exponents over 2^-133..2^100 (double butterflies round there; the kernels must round alike;
// the integer rotation falls back there), 1024-column stretches alternately narrow (2^-4..2^4)
// and wide (2^-120..2^10) with -0 in every 7th column, subnormal only (with +-0).
std::vector<uint16_t> quantizer_input(const QCase& c, std::mt19937_64& g) {
  test::Bf16Data base = test::random_rows_bf16(c.rows, c.x_ld, g);
  std::uniform_real_distribution<float> e(-20.0f, 12.0f), tiny(-133.0f, -100.0f),
      wide(-133.0f, 100.0f), narrow(-4.0f, 4.0f), wide2(-120.0f, 10.0f);
  std::uniform_int_distribution<int> mant(0, 127);
  std::bernoulli_distribution sign(0.5);
  for (int64_t r = 0; r < c.rows; ++r) {
    uint16_t* row = base.bits.data() + r * c.x_ld;
    const int kind = static_cast<int>((r + c.rows) % 7);
    for (int64_t j = 0; j < c.x_ld; ++j) {
      if (j >= c.k) {
        row[j] = f32_to_bf16(1e30f);  // padding: must not count
        continue;
      }
      const float s = sign(g) ? -1.0f : 1.0f;
      if (kind == 1) row[j] = f32_to_bf16(s * std::exp2(e(g)));
      if (kind == 2) row[j] = 0;
      if (kind == 3) row[j] = f32_to_bf16(s * std::exp2(tiny(g)));
      if (kind == 4) row[j] = f32_to_bf16(s * std::exp2(wide(g)));
      if (kind == 5)
        row[j] =
            j % 7 == 0 ? 0x8000 : f32_to_bf16(s * std::exp2((j / 1024) % 2 ? wide2(g) : narrow(g)));
      if (kind == 6) row[j] = static_cast<uint16_t>((s < 0 ? 0x8000 : 0) | mant(g));
    }
  }
  return base.bits;
}

void run_quantizer_case(const QCase& c, std::mt19937_64& g) {
  SCOPED_TRACE("rows " + std::to_string(c.rows) + " k " + std::to_string(c.k) + " group " +
               std::to_string(c.group) + " x_ld " + std::to_string(c.x_ld) + " q_ld " +
               std::to_string(c.q_ld) + (c.force_generic ? " generic kernel" : "") + " path " +
               ops::int8_quantize_path_name(c.path) + " rotate " +
               ops::int8_rotate_math_name(c.rotate));
  const std::vector<uint16_t> bits = quantizer_input(c, g);
  Tensor host = Tensor::zeros(DType::bf16, {c.rows, c.k});
  for (int64_t r = 0; r < c.rows; ++r)
    std::memcpy(host.ptr<uint16_t>() + r * c.k, bits.data() + r * c.x_ld, c.k * 2);
  const Int8Rows want = int8_quantize_rows(host, c.group);

  Tensor dx = test::upload(bits, DType::bf16, {c.rows * c.x_ld});
  Tensor dq = test::device_buffer(DType::i8, {c.rows * c.q_ld});
  Tensor ds = test::device_buffer(DType::f32, {c.rows});
  ops::Int8QuantizeCudaParams p;
  p.x = test::dptr<__nv_bfloat16>(dx);
  p.x_row_stride = c.x_ld;
  p.q = test::dptr<int8_t>(dq);
  p.q_row_stride = c.q_ld;
  p.scale = test::dptr<float>(ds);
  p.rows = c.rows;
  p.k = c.k;
  p.group = c.group;
  p.force_generic = c.force_generic;
  p.path = c.path;
  p.rotate = c.rotate;
  // The team kernel counts the units the integer form rotates in double and in int64: exactly
  // those the host rule (int8_rotate_test_util.h) names, none in the double form.
  Tensor tiers = test::upload(std::vector<int32_t>{0, 0}, DType::i32, {2});
  if (c.path == Int8QuantizePath::kTeam) p.rotate_tiers = test::dptr<uint32_t>(tiers);
  ASSERT_EQ(ops::int8_quantize_rows_cuda(p, nullptr), cudaSuccess);
  if (c.path == Int8QuantizePath::kTeam && c.group > 0) {
    const ops::Int8RotateMath math =
        c.rotate == ops::Int8RotateMath::kAuto ? ops::int8_rotate_auto_math() : c.rotate;
    const bool integer = math == ops::Int8RotateMath::kInteger;
    // The int64 tier exists where FP64 is slow.
    const bool int64_tier = ops::int8_rotate_int64_tier();
    const test::RotateTiers want_tiers =
        integer ? test::expected_rotate_tiers(bits, c.rows, c.k, c.x_ld, c.group, int64_tier)
                : test::RotateTiers{};
    const std::vector<int32_t> got_tiers = test::download<int32_t>(tiers);
    EXPECT_EQ(int64_t(got_tiers[0]), want_tiers.double_units) << "units rotated in double";
    EXPECT_EQ(int64_t(got_tiers[1]), want_tiers.int64_units) << "units rotated in int64";
    const int64_t units = c.rows * ((c.k + 511) / 512);
    if (integer && c.rows >= 7) {  // every row kind is present
      EXPECT_GT(want_tiers.double_units, 0) << "the wide rows must reach the fallback";
      if (int64_tier) EXPECT_GT(want_tiers.int64_units, 0) << "the tiny rows must take int64";
      EXPECT_LT(want_tiers.double_units + want_tiers.int64_units, units)
          << "the ordinary rows must rotate in int32";
    }
  }
  const std::vector<int8_t> q = test::download<int8_t>(dq);
  int64_t touched = 0;  // q padding (columns k .. q_ld) keeps device_buffer's 0xff poison
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t j = c.k; j < c.q_ld; ++j) touched += q[r * c.q_ld + j] != int8_t(-1);
  EXPECT_EQ(touched, 0) << "bytes of q row padding written";
  const std::vector<float> s = test::download<float>(ds);
  int64_t n = 0;
  const int64_t fs = first_diff(s.data(), want.scale.ptr<float>(), s.size() * 4, &n);
  EXPECT_EQ(n, 0) << "scale bytes differ, first at row " << fs / 4;
  int64_t bad = 0, first = -1;
  for (int64_t r = 0; r < c.rows; ++r) {
    int64_t cnt = 0;
    const int64_t f = first_diff(q.data() + r * c.q_ld, want.q.ptr<int8_t>() + r * c.k, c.k, &cnt);
    if (cnt && first < 0) first = r * c.k + f;
    bad += cnt;
  }
  EXPECT_EQ(bad, 0) << "q bytes differ, first at row " << first / c.k << " col " << first % c.k;
}

TEST(Int8LinearCuda, QuantizerBitExactWithHostReference) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  for (int group : {0, 16, 64, 256})
    for (int64_t k : {5376, 14336, 7168})
      for (int64_t rows : {1, 37, 130}) {
        // Alternate contiguous rows with a 16-byte aligned padded stride (both fast kernel).
        const int64_t pad = rows == 37 ? 64 : 0;
        run_quantizer_case({rows, k, group, k + pad, k + (rows == 130 ? 16 : 0), false}, g);
      }
}

TEST(Int8LinearCuda, QuantizerGenericKernelBitExact) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  for (int group : {0, 4, 16, 64, 256, 1024}) {
    run_quantizer_case({37, 5120, group, 5120 + 3, 5120 + 1, false}, g);  // misaligned: generic
    run_quantizer_case({13, 14336, group, 14336, 14336, true}, g);        // forced generic
  }
  run_quantizer_case({5, 40, 4, 41, 40, false}, g);  // k not a multiple of 16
  run_quantizer_case({3, 7, 0, 7, 7, false}, g);
  run_quantizer_case({130, 256, 4, 256, 256, false}, g);  // fast kernel, G = 4, one warp
}

// Whether `path` can take a [rows, k] quantization with these strides on this device.
bool quantize_path_takes(Int8QuantizePath path, int64_t k, int group, int64_t x_ld, int64_t q_ld) {
  alignas(16) static int8_t dummy[16];
  ops::Int8QuantizeCudaParams p;
  p.x = reinterpret_cast<const __nv_bfloat16*>(dummy);
  p.q = dummy;
  p.scale = reinterpret_cast<float*>(dummy);
  p.rows = 1;
  p.k = k;
  p.x_row_stride = x_ld;
  p.q_row_stride = q_ld;
  p.group = group;
  p.path = path;
  return ops::int8_quantize_resolve_path(p) == path;
}

// The team kernel (and, for comparison, the block register kernel) forced on every group, the H3
// widths, the tiny model's widths, widths with a partial last 512-column unit, row counts 1, 37,
// 130 and 1000, contiguous and strided rows.
TEST(Int8LinearCuda, QuantizerRegisterKernelsBitExact) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  int ran = 0;
  for (Int8QuantizePath path : {Int8QuantizePath::kTeam, Int8QuantizePath::kBlock}) {
    if (!quantize_path_takes(path, 5376, 256, 5376, 5376)) {
      std::printf("int8 quantize path %s not available here: not tested\n",
                  ops::int8_quantize_path_name(path));
      continue;
    }
    for (int group : {0, 4, 16, 64, 256}) {
      for (int64_t k : {5376, 7168, 14336, 16384, 192, 256, 384, 768, 1280, 4096 + 64, 16, 48}) {
        if ((group > 0 && k % group != 0) || (k == 16384 && group != 256)) continue;
        for (int64_t rows : {1, 37, 130, 1000}) {
          if (rows == 1000 && k > 5376) continue;  // host reference time
          const int64_t x_pad = rows == 37 ? 72 : (rows == 1000 ? 8 : 0);
          const int64_t q_pad = rows == 130 ? 16 : (rows == 1000 ? 48 : 0);
          ASSERT_TRUE(quantize_path_takes(path, k, group, k + x_pad, k + q_pad));
          run_quantizer_case({rows, k, group, k + x_pad, k + q_pad, false, path}, g);
          ++ran;
        }
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "no register kernel on this device";
}

// The team kernel's two rotation forms forced on the same rows (the RNG state copied): each
// bit-identical to the host rule, so to each other; the integer form falls back exactly where
// the span rule says (all-zero, subnormal, narrow rows never; the wide kinds do).
TEST(Int8LinearCuda, QuantizerIntegerRotationBitExact) {
  H3RT_REQUIRE_GPU();
  if (!quantize_path_takes(Int8QuantizePath::kTeam, 5376, 256, 5376, 5376))
    GTEST_SKIP() << "no team kernel on this device";
  std::printf("rotation form of kAuto on this device: %s\n",
              ops::int8_rotate_math_name(ops::int8_rotate_auto_math()));
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  for (int group : {4, 16, 64, 256})
    for (int64_t k : {256, 1024, 5376, 14336}) {
      if (k % group != 0) continue;
      for (int64_t rows : {1, 7, 37, 130}) {
        const int64_t x_pad = rows == 37 ? 72 : 0, q_pad = rows == 130 ? 16 : 0;
        std::mt19937_64 same = g;
        for (ops::Int8RotateMath math :
             {ops::Int8RotateMath::kDouble, ops::Int8RotateMath::kInteger,
              ops::Int8RotateMath::kAuto}) {
          same = g;  // the same rows for each form
          run_quantizer_case(
              {rows, k, group, k + x_pad, k + q_pad, false, Int8QuantizePath::kTeam, math}, same);
        }
        g = same;
      }
    }
}

TEST(Int8LinearCuda, QuantizerPathSelection) {
  H3RT_REQUIRE_GPU();
  if (std::getenv("H3RT_INT8_QUANT")) GTEST_SKIP() << "H3RT_INT8_QUANT overrides kAuto";
  const bool team = quantize_path_takes(Int8QuantizePath::kTeam, 5376, 256, 5376, 5376);
  EXPECT_EQ(team, cuda::current_device_cc() >= 90);
  const Int8QuantizePath reg = team ? Int8QuantizePath::kTeam : Int8QuantizePath::kBlock;
  // The H3 widths and the tiny model's take a register kernel.
  for (int64_t k : {5376, 7168, 14336})
    for (int group : {0, 256}) EXPECT_TRUE(quantize_path_takes(reg, k, group, k, k)) << k;
  for (int64_t k : {192, 256, 384})
    for (int group : {16, 64}) EXPECT_TRUE(quantize_path_takes(reg, k, group, k, k)) << k;
  // kAuto: the team kernel where it fits, misaligned rows the shared-memory one; forcing a
  // kernel that cannot take the call fails instead of falling back.
  ops::Int8QuantizeCudaParams p;
  alignas(16) static int8_t dummy[16];
  p.x = reinterpret_cast<const __nv_bfloat16*>(dummy);
  p.q = dummy;
  p.scale = reinterpret_cast<float*>(dummy);
  p.rows = 1;
  p.k = p.x_row_stride = p.q_row_stride = 5376;
  p.group = 256;
  EXPECT_EQ(ops::int8_quantize_resolve_path(p), reg);
  p.x_row_stride = 5377;
  EXPECT_EQ(ops::int8_quantize_resolve_path(p), Int8QuantizePath::kGeneric);
  p.path = Int8QuantizePath::kTeam;
  EXPECT_EQ(ops::int8_quantize_resolve_path(p), Int8QuantizePath::kAuto);
  EXPECT_EQ(ops::int8_quantize_rows_cuda(p, nullptr), cudaErrorNotSupported);
  p.path = Int8QuantizePath::kBlock;
  EXPECT_EQ(ops::int8_quantize_rows_cuda(p, nullptr), cudaErrorNotSupported);
}

// ---- the GEMM -------------------------------------------------------------------------------

// A path, and for kCutlassSm90 one explicit config.
struct GemmVariant {
  Int8GemmPath path;
  Int8CutlassConfig config = Int8CutlassConfig::kAuto;
  std::string name() const {
    return path == Int8GemmPath::kCutlassSm90
               ? std::string("cutlass_") + ops::int8_cutlass_config_name(config)
               : std::string(ops::int8_gemm_path_name(path));
  }
};

std::vector<GemmVariant> available_paths() {
  std::vector<GemmVariant> paths;
  if (ops::int8_linear_path_available(Int8GemmPath::kCublasLt))
    paths.push_back({Int8GemmPath::kCublasLt});
  if (ops::int8_linear_path_available(Int8GemmPath::kCutlassSm90))
    for (Int8CutlassConfig c : ops::kInt8CutlassConfigs)
      paths.push_back({Int8GemmPath::kCutlassSm90, c});
  else
    std::printf("int8 GEMM path cutlass_sm90 not available here: not tested\n");
  // The mma.sync kernel is sm_120 / sm_121's default; its sm_90a code runs here.
  if (ops::int8_linear_path_available(Int8GemmPath::kCutlassSm80))
    paths.push_back({Int8GemmPath::kCutlassSm80});
  else
    std::printf("int8 GEMM path cutlass_sm80 not available here: not tested\n");
  return paths;
}

struct GemmOperands {
  Int8Rows x;  // host
  Tensor w, ws, bias;
  Tensor dx, dxs, dw, dws, dbias;
  int64_t x_ld = 0;
};

GemmOperands gemm_operands(int64_t m, int64_t n, int64_t k, int64_t x_ld, std::mt19937_64& g) {
  std::uniform_int_distribution<int> q(-128, 127);
  std::uniform_real_distribution<float> e(-12.0f, 2.0f);
  GemmOperands o;
  o.x_ld = x_ld;
  o.x = {Tensor::zeros(DType::i8, {m, k}), Tensor::zeros(DType::f32, {m, 1})};
  o.w = Tensor::zeros(DType::i8, {n, k});
  o.ws = Tensor::zeros(DType::f32, {n});
  o.bias = Tensor::zeros(DType::bf16, {n});
  std::vector<int8_t> xpad(m * x_ld, 0x55);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; ++j)
      xpad[i * x_ld + j] = o.x.q.ptr<int8_t>()[i * k + j] = static_cast<int8_t>(q(g));
  for (int64_t i = 0; i < n * k; ++i) o.w.ptr<int8_t>()[i] = static_cast<int8_t>(q(g));
  for (int64_t i = 0; i < m; ++i) o.x.scale.ptr<float>()[i] = std::exp2(e(g)) / 127.0f;
  for (int64_t i = 0; i < n; ++i) {
    o.ws.ptr<float>()[i] = std::exp2(e(g)) / 127.0f;
    o.bias.ptr<uint16_t>()[i] = f32_to_bf16(std::ldexp(e(g) + 5.0f, -q(g) / 16));
  }
  auto up = [](const Tensor& t) {
    Tensor d = cuda::device_empty(t.dtype(), t.shape());
    H3RT_CUDA_CHECK(cudaMemcpy(d.data(), t.data(), t.nbytes(), cudaMemcpyHostToDevice));
    return d;
  };
  o.dx = test::upload(xpad, DType::i8, {m * x_ld});
  o.dxs = up(o.x.scale);
  o.dw = up(o.w);
  o.dws = up(o.ws);
  o.dbias = up(o.bias);
  return o;
}

// The call on o's device operands (bias or none) writing dy with row stride y_ld: path kAuto,
// no workspace.
ops::Int8LinearCudaParams gemm_params(const GemmOperands& o, Tensor& dy, int64_t y_ld, bool bias) {
  ops::Int8LinearCudaParams p;
  p.x = test::dptr<int8_t>(o.dx);
  p.x_row_stride = o.x_ld;
  p.x_scale = test::dptr<float>(o.dxs);
  p.w = test::dptr<int8_t>(o.dw);
  p.w_scale = test::dptr<float>(o.dws);
  p.bias = bias ? test::dptr<__nv_bfloat16>(o.dbias) : nullptr;
  p.y = test::dptr<__nv_bfloat16>(dy);
  p.y_row_stride = y_ld;
  p.rows = o.x.q.size(0);
  p.in = o.w.size(1);
  p.out = o.w.size(0);
  return p;
}

// Runs `path` and compares y with the host's bytes `want` [m, n].
void expect_gemm_matches(const GemmOperands& o, const Tensor& want, bool bias, int64_t y_ld,
                         const GemmVariant& path) {
  const int64_t m = want.size(0), n = want.size(1);
  SCOPED_TRACE("path " + path.name());
  Tensor dy = test::device_buffer(DType::bf16, {m * y_ld});
  const size_t wsb = ops::int8_linear_workspace_bytes(m, n);
  Tensor dws = test::device_buffer(DType::u8, {std::max<int64_t>(int64_t(wsb), 1)});
  ops::Int8LinearCudaParams p = gemm_params(o, dy, y_ld, bias);
  p.workspace = dws.data();
  p.workspace_bytes = wsb;
  p.path = path.path;
  p.cutlass_config = path.config;
  ASSERT_EQ(ops::int8_linear_cuda(p, nullptr), cudaSuccess);
  const std::vector<uint16_t> y = test::download<uint16_t>(dy);
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      if (y[i * y_ld + j] != want.ptr<uint16_t>()[i * n + j] && bad++ == 0) first = i * n + j;
  EXPECT_EQ(bad, 0) << "of " << m * n << " outputs differ; first at row " << first / n << " col "
                    << first % n << ": got 0x" << std::hex
                    << (first >= 0 ? y[(first / n) * y_ld + first % n] : 0) << " want 0x"
                    << (first >= 0 ? want.ptr<uint16_t>()[first] : 0);
}

struct GCase {
  int64_t m, n, k, x_pad, y_pad;
};

TEST(Int8LinearCuda, GemmBitExactWithHostReferenceOnEveryPath) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const std::vector<GemmVariant> paths = available_paths();
  // M x N x K summed: about 11e9 multiply-adds on the host.
  std::vector<GCase> cases;
  for (int64_t m : {1, 37, 130, 1000})
    for (int64_t k : {5376, 14336}) cases.push_back({m, 48, k, 0, 0});
  for (int64_t m : {1, 37, 130}) cases.push_back({m, 5376, 5376, 0, 0});
  cases.push_back({37, 5376, 14336, 32, 8});  // strided x and y
  cases.push_back({130, 48, 5376, 16, 40});
  // N tiles partial for 128-, 256-wide tiles and several M and N tiles, so the swizzled
  // schedules' padding tiles (CUTLASS rounds both tile counts up to swizzle x cluster) occur.
  cases.push_back({130, 600, 5376, 0, 0});
  cases.push_back({1000, 264, 5376, 16, 24});
  int idx = 0;
  for (const GCase& c : cases) {
    const bool bias = (idx++ % 2) == 1;
    SCOPED_TRACE("M " + std::to_string(c.m) + " N " + std::to_string(c.n) + " K " +
                 std::to_string(c.k) + (bias ? " bias" : " no bias") + " x_pad " +
                 std::to_string(c.x_pad) + " y_pad " + std::to_string(c.y_pad));
    const GemmOperands o = gemm_operands(c.m, c.n, c.k, c.k + c.x_pad, g);
    const Tensor want = int8_linear(o.x, o.w, o.ws, bias ? &o.bias : nullptr);
    for (const GemmVariant& path : paths) expect_gemm_matches(o, want, bias, c.n + c.y_pad, path);
    // Both settings of the bias on the same operands once.
    if (idx == 1) {
      const Tensor want_b = int8_linear(o.x, o.w, o.ws, &o.bias);
      for (const GemmVariant& path : paths)
        expect_gemm_matches(o, want_b, true, c.n + c.y_pad, path);
    }
  }
}

TEST(Int8LinearCuda, AutoPathPrefersCutlassOnHopper) {
  H3RT_REQUIRE_GPU();
  if (std::getenv("H3RT_INT8_GEMM")) GTEST_SKIP() << "H3RT_INT8_GEMM overrides kAuto";
  alignas(16) static int8_t dummy[16];
  ops::Int8LinearCudaParams p;
  p.x = dummy;
  p.w = dummy;
  p.y = reinterpret_cast<__nv_bfloat16*>(dummy);
  p.rows = 128;
  p.in = p.x_row_stride = 5376;
  p.out = p.y_row_stride = 5376;
  const bool cutlass = ops::int8_linear_path_available(Int8GemmPath::kCutlassSm90);
  EXPECT_EQ(ops::int8_linear_resolve_path(p),
            cutlass ? Int8GemmPath::kCutlassSm90 : Int8GemmPath::kCublasLt);
  p.in = p.x_row_stride = 5380;  // not a multiple of 16: cuBLASLt
  EXPECT_EQ(ops::int8_linear_resolve_path(p), Int8GemmPath::kCublasLt);
  // The per-shape table names a real config for every H3 shape and any other.
  for (int64_t out : {21504, 5376, 28672, 48})
    for (int64_t in : {5376, 7168, 14336}) {
      p.out = p.y_row_stride = out;
      p.in = p.x_row_stride = in;
      EXPECT_NE(ops::int8_linear_resolve_cutlass_config(p), Int8CutlassConfig::kAuto);
    }
}

// Every CUTLASS config refuses (cudaErrorNotSupported) operands that break the TMA alignment
// rules when asked for explicitly, and kAuto then computes the right bits on cuBLASLt.
TEST(Int8LinearCuda, CutlassConfigsRefuseMisalignedAndAutoFallsBack) {
  H3RT_REQUIRE_GPU();
  if (std::getenv("H3RT_INT8_GEMM")) GTEST_SKIP() << "H3RT_INT8_GEMM overrides kAuto";
  std::mt19937_64 g(test::fresh_seed());
  const int64_t m = 37, n = 264, k = 5376;
  const GemmOperands o = gemm_operands(m, n, k, k + 8, g);  // x rows 8-byte aligned only
  const Tensor want = int8_linear(o.x, o.w, o.ws, &o.bias);
  Tensor dy = test::device_buffer(DType::bf16, {m * n});
  ops::Int8LinearCudaParams p = gemm_params(o, dy, n, true);
  if (ops::int8_linear_path_available(Int8GemmPath::kCutlassSm90)) {
    p.path = Int8GemmPath::kCutlassSm90;
    for (Int8CutlassConfig c : ops::kInt8CutlassConfigs) {
      p.cutlass_config = c;
      EXPECT_EQ(ops::int8_linear_cuda(p, nullptr), cudaErrorNotSupported)
          << ops::int8_cutlass_config_name(c);
    }
    p.path = Int8GemmPath::kAuto;
    p.cutlass_config = Int8CutlassConfig::kAuto;
    EXPECT_EQ(ops::int8_linear_resolve_path(p), Int8GemmPath::kCublasLt);
  }
  if (ops::int8_linear_path_available(Int8GemmPath::kCutlassSm80)) {
    p.path = Int8GemmPath::kCutlassSm80;  // cp.async wants 16-byte x rows
    EXPECT_EQ(ops::int8_linear_cuda(p, nullptr), cudaErrorNotSupported);
    p.x_row_stride = k;
    p.bias += 1;  // the bias broadcast loads 16-byte vectors
    EXPECT_EQ(ops::int8_linear_cuda(p, nullptr), cudaErrorNotSupported);
  }
  expect_gemm_matches(o, want, true, n, {Int8GemmPath::kAuto});
}

// A path the environment names that cannot take a call is an error naming the variable (an
// explicit params.path gets cudaErrorNotSupported instead, as above).
TEST(Int8LinearCuda, EnvironmentPathThatCannotRunIsNamed) {
  H3RT_REQUIRE_GPU();
  if (std::getenv("H3RT_INT8_GEMM")) GTEST_SKIP() << "H3RT_INT8_GEMM already set";
  std::mt19937_64 g(test::fresh_seed());
  const int64_t m = 5, n = 48, k = 256;
  const GemmOperands o = gemm_operands(m, n, k, k + 8, g);  // x rows 8-byte aligned only
  Tensor dy = test::device_buffer(DType::bf16, {m * n});
  const ops::Int8LinearCudaParams p = gemm_params(o, dy, n, false);
  for (const char* v : {"cutlass", "cutlass_sm80"}) {
    ASSERT_EQ(setenv("H3RT_INT8_GEMM", v, 1), 0);
    try {
      (void)ops::int8_linear_cuda(p, nullptr);
      ADD_FAILURE() << v << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("H3RT_INT8_GEMM=") + v + " ("),
                std::string::npos)
          << e.what();
    }
  }
  unsetenv("H3RT_INT8_GEMM");
}

// H3RT_INT8_GEMM=cutlass_<name> selects each config (where params.path is kAuto).
TEST(Int8LinearCuda, EnvironmentSelectsEveryCutlassConfig) {
  if (std::getenv("H3RT_INT8_GEMM")) GTEST_SKIP() << "H3RT_INT8_GEMM already set";
  ops::Int8LinearCudaParams p;
  p.rows = 128;
  p.in = 5376;
  p.out = 21504;
  for (Int8CutlassConfig c : ops::kInt8CutlassConfigs) {
    const std::string v = std::string("cutlass_") + ops::int8_cutlass_config_name(c);
    ASSERT_EQ(setenv("H3RT_INT8_GEMM", v.c_str(), 1), 0);
    EXPECT_EQ(ops::int8_linear_resolve_path(p), Int8GemmPath::kCutlassSm90) << v;
    EXPECT_EQ(ops::int8_linear_resolve_cutlass_config(p), c) << v;
    p.cutlass_config = Int8CutlassConfig::k256x128;  // an explicit config wins
    EXPECT_EQ(ops::int8_linear_resolve_cutlass_config(p), Int8CutlassConfig::k256x128) << v;
    p.cutlass_config = Int8CutlassConfig::kAuto;
  }
  ASSERT_EQ(setenv("H3RT_INT8_GEMM", "cutlass_sm80", 1), 0);
  EXPECT_EQ(ops::int8_linear_resolve_path(p), Int8GemmPath::kCutlassSm80);
  ASSERT_EQ(setenv("H3RT_INT8_GEMM", "cutlass", 1), 0);
  EXPECT_EQ(ops::int8_linear_resolve_path(p), Int8GemmPath::kCutlassSm90);
  EXPECT_NE(ops::int8_linear_resolve_cutlass_config(p), Int8CutlassConfig::kAuto);
  unsetenv("H3RT_INT8_GEMM");
}

// kAuto's CUTLASS table gives every H3 projection at both user shapes a real config, and other
// shapes the default.
TEST(Int8LinearCuda, CutlassTableCoversTheH3Shapes) {
  const int64_t shapes[][2] = {{5376, 21504}, {7168, 5376}, {5376, 28672}, {14336, 5376}};
  for (int64_t rows : {15499, 37810})
    for (const auto& s : shapes) {
      const Int8CutlassConfig c = ops::int8_cutlass_table_config(rows, s[0], s[1]);
      EXPECT_NE(
          std::find(std::begin(ops::kInt8CutlassConfigs), std::end(ops::kInt8CutlassConfigs), c),
          std::end(ops::kInt8CutlassConfigs))
          << rows << " x " << s[0] << " -> " << s[1];
      EXPECT_NE(c, Int8CutlassConfig::kAuto) << rows << " x " << s[0] << " -> " << s[1];
    }
  EXPECT_EQ(ops::int8_cutlass_table_config(128, 256, 512),
            Int8CutlassConfig::k256x128);  // not an H3 shape: the default
}

// ---- golden vectors -------------------------------------------------------------------------

TEST(Int8LinearCuda, GoldenConvrotVectorsByteExact) {
  H3RT_REQUIRE_GPU();
  const std::string dir = test::shared_dir() + "/golden/int8_convrot";
  std::ifstream f(dir + "/manifest.json");
  ASSERT_TRUE(f.good()) << "missing " << dir << "/manifest.json";
  const nlohmann::json manifest = nlohmann::json::parse(f);
  const std::vector<GemmVariant> paths = available_paths();
  int cases = 0;
  for (const auto& e : manifest["entries"]) {
    const std::string tag = e["tag"];
    SCOPED_TRACE(tag);
    const SafetensorsFile gf = SafetensorsFile::open(dir + "/" + tag + ".safetensors");
    const Tensor x = gf.get("x").contiguous_copy(), xq = gf.get("xq"), xs = gf.get("xs");
    const Tensor wq = gf.get("wq").contiguous_copy(), ws = gf.get("ws").contiguous_copy();
    const Tensor y = gf.get("y");
    const int64_t m = x.size(0), k = x.size(1), n = wq.size(0);
    ASSERT_EQ(x.dtype(), DType::bf16);

    auto up = [](const Tensor& t) {
      Tensor d = cuda::device_empty(t.dtype(), t.shape());
      H3RT_CUDA_CHECK(cudaMemcpy(d.data(), t.data(), t.nbytes(), cudaMemcpyHostToDevice));
      return d;
    };
    Tensor dx = up(x), dws = up(ws), dwq = up(wq);
    Tensor dq = test::device_buffer(DType::i8, {m, k}), ds = test::device_buffer(DType::f32, {m});
    ops::Int8QuantizeCudaParams qp;
    qp.x = test::dptr<__nv_bfloat16>(dx);
    qp.q = test::dptr<int8_t>(dq);
    qp.scale = test::dptr<float>(ds);
    qp.rows = m;
    qp.k = k;
    qp.group = e["group_size"].get<int>();
    ASSERT_EQ(ops::int8_quantize_rows_cuda(qp, nullptr), cudaSuccess);
    const auto got_q = test::download<int8_t>(dq);
    const auto got_s = test::download<float>(ds);
    int64_t cnt = 0;
    const Tensor cxq = xq.contiguous_copy(), cxs = xs.contiguous_copy();
    int64_t at = first_diff(got_q.data(), cxq.data(), got_q.size(), &cnt);
    EXPECT_EQ(cnt, 0) << "xq, first byte " << at;
    at = first_diff(got_s.data(), cxs.data(), got_s.size() * 4, &cnt);
    EXPECT_EQ(cnt, 0) << "xs, first byte " << at;

    Tensor dbias;
    if (gf.contains("bias")) dbias = up(gf.get("bias").contiguous_copy());
    const Tensor cy = y.contiguous_copy();
    for (const GemmVariant& path : paths) {
      SCOPED_TRACE("path " + path.name());
      Tensor dy = test::device_buffer(DType::bf16, {m, n});
      const size_t wsb = ops::int8_linear_workspace_bytes(m, n);
      Tensor dwork = test::device_buffer(DType::u8, {int64_t(wsb) + 1});
      ops::Int8LinearCudaParams p;
      p.x = test::dptr<int8_t>(dq);  // our own quantization, equal to xq above
      p.x_scale = test::dptr<float>(ds);
      p.w = test::dptr<int8_t>(dwq);
      p.w_scale = test::dptr<float>(dws);
      p.bias = gf.contains("bias") ? test::dptr<__nv_bfloat16>(dbias) : nullptr;
      p.y = test::dptr<__nv_bfloat16>(dy);
      p.rows = m;
      p.in = k;
      p.out = n;
      p.workspace = dwork.data();
      p.workspace_bytes = wsb;
      p.path = path.path;
      p.cutlass_config = path.config;
      ASSERT_EQ(ops::int8_linear_cuda(p, nullptr), cudaSuccess);
      const auto got_y = test::download<uint16_t>(dy);
      at = first_diff(got_y.data(), cy.data(), got_y.size() * 2, &cnt);
      EXPECT_EQ(cnt, 0) << "y, first byte " << at;
    }
    ++cases;
  }
  EXPECT_EQ(cases, 5);
}

}  // namespace
}  // namespace h3rt
