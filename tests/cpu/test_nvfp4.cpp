#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "formats/nvfp4_layout.h"
#include "h3rt/formats.h"
#include "h3rt/nvfp4.h"
#include "h3rt/safetensors.h"
#include "test_util.h"

namespace h3rt {
namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

struct Golden {
  std::string tag;
  int64_t rows, cols;
  float per_tensor_scale;
  std::vector<uint8_t> x, qdata, scales;
};

std::vector<Golden> load_goldens() {
  const std::string dir = test::nvfp4_golden_dir();
  std::ifstream f(dir + "/manifest.json");
  EXPECT_TRUE(f.good()) << "missing " << dir << "/manifest.json";
  nlohmann::json m = nlohmann::json::parse(f);
  std::vector<Golden> out;
  for (const auto& e : m["entries"]) {
    Golden g;
    g.tag = e["tag"];
    g.rows = e["rows"];
    g.cols = e["cols"];
    uint32_t bits = 0;  // per_tensor_scale_hex: the fp32 bytes, little-endian, as hex
    const std::string hex = e["per_tensor_scale_hex"];
    for (int i = 3; i >= 0; --i) bits = bits << 8 | std::stoul(hex.substr(2 * i, 2), nullptr, 16);
    g.per_tensor_scale = std::bit_cast<float>(bits);
    EXPECT_EQ(g.per_tensor_scale, e["per_tensor_scale"].get<float>()) << g.tag;
    g.x = read_bytes(dir + "/" + g.tag + ".x.bf16");
    g.qdata = read_bytes(dir + "/" + g.tag + ".qdata.u8");
    g.scales = read_bytes(dir + "/" + g.tag + ".scales.u8");
    EXPECT_EQ(g.x.size(), static_cast<size_t>(g.rows * g.cols * 2)) << g.tag;
    out.push_back(std::move(g));
  }
  EXPECT_GE(out.size(), 6u);
  return out;
}

Tensor as_tensor(Golden& g) {
  return Tensor(g.x.data(), DType::bf16, {g.rows, g.cols});
}

size_t count_diff(const uint8_t* a, const std::vector<uint8_t>& b) {
  size_t n = 0;
  for (size_t i = 0; i < b.size(); ++i) n += a[i] != b[i];
  return n;
}

TEST(Nvfp4Layout, MatchesTheTiledFormula) {
  // Every offset of a padded matrix is hit exactly once, and spot values follow the formula.
  for (int64_t rows : {1, 128, 129, 300}) {
    for (int64_t kb : {1, 3, 4, 7, 8}) {
      const int64_t R = nvfp4::scale_rows(rows), C = nvfp4::scale_cols(kb * 16);
      std::vector<int> hits(static_cast<size_t>(R * C), 0);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t o = nvfp4::scale_offset(r, c, kb);
          ASSERT_GE(o, 0);
          ASSERT_LT(o, R * C);
          ++hits[static_cast<size_t>(o)];
        }
      for (int h : hits) ASSERT_EQ(h, 1) << "rows " << rows << " kb " << kb;
    }
  }
  EXPECT_EQ(nvfp4::scale_offset(0, 0, 8), 0);
  EXPECT_EQ(nvfp4::scale_offset(0, 3, 8), 3);
  EXPECT_EQ(nvfp4::scale_offset(32, 0, 8), 4);
  EXPECT_EQ(nvfp4::scale_offset(1, 0, 8), 16);
  EXPECT_EQ(nvfp4::scale_offset(0, 4, 8), 512);
  EXPECT_EQ(nvfp4::scale_offset(128, 0, 8), 1024);
}

TEST(Nvfp4Golden, GlobalScaleMatchesManifest) {
  for (Golden& g : load_goldens()) {
    const float got = nvfp4_global_scale(as_tensor(g), Nvfp4ScaleRule::kF32Divide);
    EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(g.per_tensor_scale)) << g.tag;
    // The activation rule rounds to bf16; the golden scales are not bf16 numbers, which is how
    // we know they were computed in fp32.
    const float act = nvfp4_global_scale(as_tensor(g), Nvfp4ScaleRule::kBf16Activation);
    const float amax = abs_max(as_tensor(g));
    EXPECT_EQ(act, round_bf16(amax * (1.0f / 2688.0f))) << g.tag;
    EXPECT_NE(act, g.per_tensor_scale) << g.tag;
    EXPECT_NE(g.per_tensor_scale, round_bf16(g.per_tensor_scale)) << g.tag;
  }
}

TEST(Nvfp4Golden, QuantizeIsBitExact) {
  for (Golden& g : load_goldens()) {
    Nvfp4Tensor q = nvfp4_quantize(as_tensor(g), g.per_tensor_scale);
    ASSERT_EQ(q.qdata.nbytes(), static_cast<int64_t>(g.qdata.size())) << g.tag;
    ASSERT_EQ(q.scales.nbytes(), static_cast<int64_t>(g.scales.size())) << g.tag;
    EXPECT_EQ(count_diff(q.qdata.ptr<uint8_t>(), g.qdata), 0u) << g.tag << " qdata";
    EXPECT_EQ(count_diff(q.scales.ptr<uint8_t>(), g.scales), 0u) << g.tag << " scales";
  }
}

TEST(Nvfp4Golden, RowStrideAndF32InputGiveTheSameBytes) {
  std::vector<Golden> gs = load_goldens();
  Golden& g = gs[0];
  // Same values in a wider bf16 buffer (row stride cols + 32) and as f32.
  const int64_t ld = g.cols + 32;
  std::vector<uint16_t> wide(static_cast<size_t>(g.rows * ld), 0x7fc0);
  std::vector<float> f(static_cast<size_t>(g.rows * g.cols));
  const uint16_t* src = reinterpret_cast<const uint16_t*>(g.x.data());
  for (int64_t r = 0; r < g.rows; ++r)
    for (int64_t c = 0; c < g.cols; ++c) {
      wide[r * ld + c] = src[r * g.cols + c];
      f[r * g.cols + c] = bf16_to_f32(src[r * g.cols + c]);
    }
  Tensor tw(wide.data(), DType::bf16, {g.rows, g.cols}, {ld, 1}, nullptr, Device::cpu);
  Tensor tf(f.data(), DType::f32, {g.rows, g.cols});
  for (const Tensor& t : {tw, tf}) {
    Nvfp4Tensor q = nvfp4_quantize(t, g.per_tensor_scale);
    EXPECT_EQ(count_diff(q.qdata.ptr<uint8_t>(), g.qdata), 0u);
    EXPECT_EQ(count_diff(q.scales.ptr<uint8_t>(), g.scales), 0u);
  }
}

TEST(Nvfp4, DequantizeInvertsWithinHalfAStep) {
  std::vector<Golden> gs = load_goldens();
  for (Golden& g : gs) {
    Tensor x = as_tensor(g);
    Nvfp4Tensor q = nvfp4_quantize(x, g.per_tensor_scale);
    Tensor d = nvfp4_dequantize(q.qdata, q.scales, g.per_tensor_scale);
    std::vector<float> xv = x.to_f32();
    const float* dv = d.ptr<float>();
    const int64_t kb = g.cols / 16;
    for (int64_t r = 0; r < g.rows; ++r)
      for (int64_t c = 0; c < g.cols; ++c) {
        const float s = e4m3_to_f32(q.scales.ptr<uint8_t>()[nvfp4::scale_offset(r, c / 16, kb)]);
        const float step = s * g.per_tensor_scale;  // codes are at most 2 steps apart
        const float xi = xv[r * g.cols + c];
        if (step == 0.0f) {
          ASSERT_EQ(dv[r * g.cols + c], 0.0f);
          continue;
        }
        // |x/step| <= ~6.4 after e4m3 rounding of the scale; error <= half the code gap (1)
        // plus saturation beyond 6.
        const float err = std::fabs(dv[r * g.cols + c] - xi) / step;
        const float sat = std::fmax(std::fabs(xi) / step - 6.0f, 0.0f);
        ASSERT_LE(err, 1.0f + sat + 1e-4f) << g.tag << " r " << r << " c " << c;
      }
  }
}

TEST(Nvfp4, RejectsBadShapesAndScales) {
  std::vector<uint16_t> buf(48, 0);
  Tensor bad_cols(buf.data(), DType::bf16, {2, 24});
  EXPECT_THROW(nvfp4_quantize(bad_cols, 1.0f), Error);
  Tensor ok(buf.data(), DType::bf16, {3, 16});
  EXPECT_THROW(nvfp4_quantize(ok, -1.0f), Error);
  EXPECT_THROW(nvfp4_quantize(ok, INFINITY), Error);
  Tensor i32(buf.data(), DType::i32, {1, 16});
  EXPECT_THROW(nvfp4_quantize(i32, 1.0f), Error);
}

TEST(Nvfp4, ZeroBlocksAndZeroGlobalScaleGivePositiveZeroCodes) {
  std::vector<float> v(32, 0.0f);
  v[16] = -1.0f;  // second block nonzero
  v[17] = -1e-30f;
  Tensor t(v.data(), DType::f32, {1, 32});
  Nvfp4Tensor q = nvfp4_quantize(t, 0.0f);  // g == 0: s saturates at 448, g*s == 0
  for (int i = 0; i < 16; ++i) EXPECT_EQ(q.qdata.ptr<uint8_t>()[i], 0);
  EXPECT_EQ(q.scales.ptr<uint8_t>()[0], 0);     // 0/0 block: scale 0
  EXPECT_EQ(q.scales.ptr<uint8_t>()[1], 0x7e);  // 448
  Nvfp4Tensor q2 = nvfp4_quantize(t, 1.0f / 6.0f);
  EXPECT_EQ(q2.qdata.ptr<uint8_t>()[8], 0xf8);  // -6 in the high nibble, -0 in the low nibble
}

// The GPU kernels divide through one correctly rounded reciprocal per block
// (nvfp4::div_by_reciprocal); check it against IEEE division on every bf16 magnitude and a wide
// spread of divisors g * s: bits equal wherever a >= 2^-100 and the quotient is normal and
// below 8, codes always.
TEST(Nvfp4, ReciprocalDivisionMatchesIeeeDivision) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> lg(-100.0f, 100.0f);
  size_t checked = 0;
  for (int t = 0; t < 400; ++t) {
    const float g = std::exp2(lg(rng)) * (1.0f + static_cast<float>(t) / 160.0f);
    for (int sc = 1; sc < 0x7f; sc += 3) {
      const float d = g * e4m3_to_f32(static_cast<uint8_t>(sc));
      if (!(d >= nvfp4::kRecipMinDivisor && d <= nvfp4::kRecipMaxDivisor)) continue;
      const float r = 1.0f / d;
      for (uint32_t b = 0; b < 0x7f80; b += 1 + (b & 3)) {
        const float a = bf16_to_f32(static_cast<uint16_t>(b));
        const float want = a / d, got = nvfp4::div_by_reciprocal(a, d, r);
        if (a >= 0x1p-100f && want >= 0x1p-126f && want < 8.0f) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << a << " / " << d;
        }
        ASSERT_EQ(nvfp4::e2m1_magnitude(got), nvfp4::e2m1_magnitude(want)) << a << " / " << d;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 1000000u);
}

TEST(Nvfp4, E2m1MagnitudeMatchesTheHostConversion) {
  // Every float in [2^-3, 8] (all thresholds lie there) plus a stride over the rest.
  for (uint32_t u = 0; u < 0x3e000000u; u += 997)
    ASSERT_EQ(nvfp4::e2m1_magnitude(std::bit_cast<float>(u)), 0u);
  for (uint32_t u = 0x3e000000u; u <= 0x41000000u; ++u) {
    const float v = std::bit_cast<float>(u);
    ASSERT_EQ(nvfp4::e2m1_magnitude(v), f32_to_e2m1(std::fmin(v, 6.0f))) << v;
  }
  for (uint32_t u = 0x41000000u; u < 0x7f800000u; u += 4093)
    ASSERT_EQ(nvfp4::e2m1_magnitude(std::bit_cast<float>(u)), 7u);
  EXPECT_EQ(nvfp4::e2m1_magnitude(INFINITY), 7u);
  EXPECT_EQ(nvfp4::e2m1_magnitude(NAN), 7u);
}

// ---- the quantize-nvfp4 file transform and CLI verb ----

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("h3rt_nvfp4_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

void expect_file_matches(const std::string& path, const Golden& g) {
  SafetensorsFile f = SafetensorsFile::open(path);
  const Tensor q = f.get("qdata", DType::u8, {g.rows, g.cols / 2});
  const Tensor s =
      f.get("scales", DType::u8, {nvfp4::scale_rows(g.rows), nvfp4::scale_cols(g.cols)});
  const Tensor pts = f.get("per_tensor_scale", DType::f32, {1});
  EXPECT_EQ(count_diff(q.ptr<uint8_t>(), g.qdata), 0u) << g.tag;
  EXPECT_EQ(count_diff(s.ptr<uint8_t>(), g.scales), 0u) << g.tag;
  EXPECT_EQ(std::bit_cast<uint32_t>(pts.ptr<float>()[0]),
            std::bit_cast<uint32_t>(g.per_tensor_scale));
}

TEST(Nvfp4File, QuantizesGoldenWithAndWithoutGivenScale) {
  std::vector<Golden> gs = load_goldens();
  for (size_t i : {size_t{3}, size_t{5}}) {  // r5_k48 and r1_k5376: scale given / computed
    Golden& g = gs[i];
    const std::string in = temp_path(g.tag + ".in.safetensors");
    const std::string out = temp_path(g.tag + ".out.safetensors");
    Tensor scale = Tensor::zeros(DType::f32, {1});
    scale.ptr<float>()[0] = g.per_tensor_scale;
    NamedTensors t{{"x", as_tensor(g)}};
    if (i == 3) t.push_back({"per_tensor_scale", scale});
    write_safetensors(in, t);
    quantize_nvfp4_file(in, out);
    expect_file_matches(out, g);
    std::filesystem::remove(in);
    std::filesystem::remove(out);
  }
}

TEST(Nvfp4File, ErrorsNameFileTensorAndShape) {
  const std::string in = temp_path("bad.safetensors"), out = temp_path("bad_out.safetensors");
  auto message = [&](const NamedTensors& t) {
    write_safetensors(in, t);
    try {
      quantize_nvfp4_file(in, out);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::vector<uint16_t> b(2 * 24, 0);
  std::vector<float> f(2 * 32, 0.0f);
  std::string m = message({{"y", Tensor(b.data(), DType::bf16, {2, 24})}});
  EXPECT_NE(m.find(in), std::string::npos) << m;
  EXPECT_NE(m.find("`x`"), std::string::npos) << m;
  m = message({{"x", Tensor(f.data(), DType::f32, {2, 32})}});
  EXPECT_NE(m.find("bf16 [rows, cols]"), std::string::npos) << m;
  EXPECT_NE(m.find("f32 [2, 32]"), std::string::npos) << m;
  m = message({{"x", Tensor(b.data(), DType::bf16, {2, 24})}});
  EXPECT_NE(m.find("multiple of 16"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 24]"), std::string::npos) << m;
  EXPECT_FALSE(std::filesystem::exists(out));
  std::filesystem::remove(in);
}

TEST(Nvfp4File, CliVerbWritesGoldenBytes) {
  std::vector<Golden> gs = load_goldens();
  Golden& g = gs[4];  // r129_k64: rows padded to 256
  const std::string in = temp_path("cli.in.safetensors"), out = temp_path("cli.out.safetensors");
  write_safetensors(in, {{"x", as_tensor(g)}});
  const std::string cmd =
      std::string(H3RT_CLI_PATH) + " quantize-nvfp4 --in " + in + " --out " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  expect_file_matches(out, g);
  const std::string bad = std::string(H3RT_CLI_PATH) + " quantize-nvfp4 --in " + out + " --out " +
                          in + ".x 2>/dev/null";
  EXPECT_NE(std::system(bad.c_str()), 0);  // no `x` in the output file
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}

}  // namespace
}  // namespace h3rt
