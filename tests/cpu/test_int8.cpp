// int8 W8A8 (ComfyUI int8_tensorwise / int8_convrot): the Hadamard rotation, the row quantizer
// and the int8 GEMM against the golden vectors (byte for byte) and against direct formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "h3rt/formats.h"
#include "h3rt/int8.h"
#include "h3rt/safetensors.h"
#include "test_util.h"

namespace h3rt {
namespace {

std::string int8_golden_dir() {
  return test::shared_dir() + "/golden/int8_convrot";
}

// Number of bytes that differ between two tensors of the same size (and the first index).
int64_t differing_bytes(const Tensor& a, const Tensor& b, int64_t* first = nullptr) {
  EXPECT_EQ(a.nbytes(), b.nbytes());
  const Tensor ca = a.contiguous_copy(), cb = b.contiguous_copy();
  const auto* pa = ca.ptr<uint8_t>();
  const auto* pb = cb.ptr<uint8_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < std::min(a.nbytes(), b.nbytes()); ++i)
    if (pa[i] != pb[i] && n++ == 0 && first) *first = i;
  return n;
}

TEST(Int8Convrot, HadamardSignIsKroneckerPowerOfH4) {
  const int h4[4][4] = {{1, 1, 1, -1}, {1, 1, -1, 1}, {1, -1, 1, 1}, {-1, 1, 1, 1}};
  // H16 = H4 (x) H4: entry (4a+b, 4c+d) = H4[a][c] * H4[b][d].
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      EXPECT_EQ(hadamard_sign(i, j), h4[i / 4][j / 4] * h4[i % 4][j % 4]) << i << "," << j;
  EXPECT_TRUE(convrot_group_valid(4));
  EXPECT_TRUE(convrot_group_valid(256));
  EXPECT_FALSE(convrot_group_valid(128));
  EXPECT_FALSE(convrot_group_valid(0));
  EXPECT_FALSE(convrot_group_valid(1));
}

// The butterfly equals the direct sum x H (H = signs / sqrt(G)), and applying it twice gives x.
TEST(Int8Convrot, RotationIsExactAndSelfInverse) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t g : {4, 16, 64, 256}) {
    const int64_t k = 2 * g;
    std::vector<float> x(k), y(k), z(k);
    for (float& v : x) v = round_bf16(nd(rng));
    hadamard_rotate_rows(x.data(), y.data(), 1, k, g);
    const double inv = 1.0 / std::sqrt(static_cast<double>(g));
    for (int64_t base = 0; base < k; base += g)
      for (int64_t j = 0; j < g; ++j) {
        double acc = 0.0;
        for (int64_t i = 0; i < g; ++i) acc += hadamard_sign(i, j) * double{x[base + i]};
        ASSERT_EQ(y[base + j], static_cast<float>(acc * inv)) << "g=" << g << " j=" << j;
      }
    hadamard_rotate_rows(y.data(), z.data(), 1, k, g);
    for (int64_t i = 0; i < k; ++i) EXPECT_NEAR(z[i], x[i], 1e-6f * (1 + std::fabs(x[i])));
  }
  std::vector<float> x(96), y(96);
  EXPECT_THROW(hadamard_rotate_rows(x.data(), y.data(), 1, 96, 64),
               Error);  // 64 does not divide 96
  EXPECT_THROW(hadamard_rotate_rows(x.data(), y.data(), 1, 96, 32), Error);  // not a power of 4
}

TEST(Int8Convrot, GoldenVectorsByteExact) {
  std::ifstream f(int8_golden_dir() + "/manifest.json");
  ASSERT_TRUE(f.good()) << "missing " << int8_golden_dir() << "/manifest.json";
  const nlohmann::json manifest = nlohmann::json::parse(f);
  int cases = 0;
  for (const auto& e : manifest["entries"]) {
    const std::string tag = e["tag"];
    SCOPED_TRACE(tag);
    const SafetensorsFile g = SafetensorsFile::open(int8_golden_dir() + "/" + tag + ".safetensors");
    const int64_t group = e["group_size"];
    const Int8Rows w = int8_quantize_rows(g.get("w"), group);
    const Int8Rows x = int8_quantize_rows(g.get("x"), group);
    int64_t at = -1;
    EXPECT_EQ(differing_bytes(w.q, g.get("wq")), 0) << "wq";
    EXPECT_EQ(differing_bytes(w.scale, g.get("ws"), &at), 0) << "ws, first byte " << at;
    EXPECT_EQ(differing_bytes(x.q, g.get("xq")), 0) << "xq";
    EXPECT_EQ(differing_bytes(x.scale, g.get("xs"), &at), 0) << "xs, first byte " << at;
    Tensor bias;
    if (g.contains("bias")) bias = g.get("bias");
    const Tensor y = int8_linear(x, g.get("wq"), g.get("ws"), g.contains("bias") ? &bias : nullptr);
    EXPECT_EQ(differing_bytes(y, g.get("y"), &at), 0) << "y, first byte " << at;
    EXPECT_EQ(differing_bytes(g.get("y"), g.get("y_cuda")), 0) << "the golden y and y_cuda";
    ++cases;
  }
  EXPECT_EQ(cases, 5);
}

}  // namespace
}  // namespace h3rt
