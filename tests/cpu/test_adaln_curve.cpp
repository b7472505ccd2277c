// The curve-form ("pruned") AdaLN: the table interpolation, the forward against the full model
// where the curve is exact, the loader (published shapes, f16 storage, malformed tables), and
// prune-adaln through the CLI.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "golden_inputs.h"
#include "h3rt/adaln_curve.h"
#include "h3rt/model.h"
#include "h3rt/safetensors.h"
#include "model/weights.h"
#include "ops/adaln_curve/adaln_curve.h"
#include "ops/linear/linear.h"
#include "test_util.h"
#include "variant_files.h"

namespace h3rt {
namespace {

using test::CliRun;
using test::run_cli;

namespace fs = std::filesystem;

// One folder per test process (ctest runs tests in parallel processes, and two of them writing
// the same file name raced in the atomic writer's rename), removed when the process exits.
std::string tmp(const std::string& name) {
  static const test::TempDir dir("h3rt_adaln_curve_tests");
  return dir.file(name);
}

std::string load_error(const std::string& path) {
  try {
    load_model(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

double max_abs_diff(const FloatVec& a, const FloatVec& b, double* ref_max = nullptr) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0, r = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    d = std::max(d, std::fabs(double(a[i]) - b[i]));
    r = std::max(r, std::fabs(double(b[i])));
  }
  if (ref_max) *ref_max = r;
  return d;
}

TEST(AdalnCurve, EmbedInterpolatesLikeTorchLerp) {
  const int64_t grid = 5, rank = 3;
  std::vector<float> table(grid * rank);
  for (size_t i = 0; i < table.size(); ++i) table[i] = std::sin(0.7f * float(i)) * 3.0f;
  const std::vector<float> t = {0.0f, 0.25f, 0.3f, 0.4f, 0.99f, 1.0f, -0.5f, 2.0f};
  std::vector<float> out(t.size() * rank);
  ops::adaln_curve_embed_cpu({table.data(), t.data(), out.data(), grid, rank, int64_t(t.size())});
  for (size_t m = 0; m < t.size(); ++m) {
    const float tc = std::clamp(t[m], 0.0f, 1.0f);
    const float pos = tc * float(grid - 1);
    const int64_t i0 = std::min<int64_t>(int64_t(std::floor(pos)), grid - 2);
    const double w = double(pos) - double(i0);
    for (int64_t j = 0; j < rank; ++j) {
      const double a = table[i0 * rank + j], b = table[(i0 + 1) * rank + j];
      const double want = a + w * (b - a);
      EXPECT_NEAR(out[m * rank + j], want, 2e-7 * (std::fabs(a) + std::fabs(b)))
          << "t " << t[m] << " column " << j;
    }
  }
  // Nodes and the clamped ends are table rows exactly: t = 0.25 is row 1, t >= 1 the last row.
  for (int64_t j = 0; j < rank; ++j) {
    EXPECT_EQ(out[1 * rank + j], table[1 * rank + j]);
    EXPECT_EQ(out[5 * rank + j], table[4 * rank + j]);
    EXPECT_EQ(out[6 * rank + j], table[0 * rank + j]);
    EXPECT_EQ(out[7 * rank + j], table[4 * rank + j]);
  }
}

TEST(AdalnCurve, ModulateRoundsEachOpToFloat32) {
  const std::vector<float> n = {1.5f, -2.0f, 0.1f, 3.0f}, table = {0.25f, -1.0f, 0.5f, 2.0f};
  std::vector<float> y2(4);
  ops::curve_modulate_cpu({n.data(), table.data(), table.data() + 2, nullptr, y2.data(), 2, 2, 4});
  // shift [0.25, -1], scale [0.5, 2]: y = n * (1 + scale) + shift
  EXPECT_EQ(y2[0], 1.5f * 1.5f + 0.25f);
  EXPECT_EQ(y2[1], -2.0f * 3.0f - 1.0f);
  EXPECT_EQ(y2[2], 0.1f * 1.5f + 0.25f);
  EXPECT_EQ(y2[3], 3.0f * 3.0f - 1.0f);
}

// Plan of the golden inputs with its timesteps replaced by `t` (one value per timestep row).
TimestepPlan plan_at(const std::vector<float>& t) {
  TimestepPlan p = test::golden_inputs().plan;
  for (size_t m = 0; m < p.timestep.size(); ++m) p.timestep[m] = t[m % t.size()];
  return p;
}

struct CurvePair {
  H3Model full, curve;
};

const CurvePair& exact_pair() {
  static const CurvePair p = [] {
    const std::string path = tmp("exact_curve.safetensors");
    test::write_exact_curve_file(path, 65);  // t_i = i / 64: pos = t * 64 is exact
    return CurvePair{load_model(test::golden_weights()), load_model(path)};
  }();
  return p;
}

TEST(AdalnCurve, ExactBasisMatchesFullModelAtGridNodes) {
  const CurvePair& p = exact_pair();
  EXPECT_TRUE(p.curve.config.adaln_curve());
  EXPECT_EQ(p.curve.config.adaln_curve_grid, 65);
  EXPECT_EQ(p.curve.config.adaln_curve_rank, p.full.config.time_embed_dim + 1);
  const test::GoldenInputs& g = test::golden_inputs();
  // Grid nodes (including both ends): fp32 forwards identical to the last bit, since each AdaLN
  // output sums the same float32 products in the same order (the bias as the input-1 column).
  for (const std::vector<float>& t :
       {std::vector<float>{0.0f, 1.0f}, {40.0f / 64, 13.0f / 64}, {63.0f / 64, 1.0f / 64}}) {
    const TimestepPlan plan = plan_at(t);
    const ForwardInputs in{g.layout, plan, g.video.data(), g.audio.data(), g.text.data()};
    const ForwardOutputs a = forward_cpu(p.full, in, Precision::fp32);
    const ForwardOutputs b = forward_cpu(p.curve, in, Precision::fp32);
    test::expect_same_bits(b.video_velocity, a.video_velocity,
                           "video at t " + std::to_string(t[0]));
    test::expect_same_bits(b.audio_velocity, a.audio_velocity,
                           "audio at t " + std::to_string(t[0]));
  }
}

TEST(AdalnCurve, ExactBasisBetweenNodesWithinInterpolationError) {
  const CurvePair& p = exact_pair();
  const test::GoldenInputs& g = test::golden_inputs();
  double worst = 0;
  for (const std::vector<float>& t : {std::vector<float>{0.5f / 64, 20.5f / 64},
                                      {40.5f / 64, 63.5f / 64},
                                      {32.25f / 64, 10.75f / 64}}) {
    const TimestepPlan plan = plan_at(t);
    const ForwardInputs in{g.layout, plan, g.video.data(), g.audio.data(), g.text.data()};
    const ForwardOutputs a = forward_cpu(p.full, in, Precision::fp32);
    const ForwardOutputs b = forward_cpu(p.curve, in, Precision::fp32);
    double rv = 0, ra = 0;
    const double dv = max_abs_diff(b.video_velocity, a.video_velocity, &rv);
    const double da = max_abs_diff(b.audio_velocity, a.audio_velocity, &ra);
    std::printf("between nodes t %.6f/%.6f: video max abs %.3g (rel %.3g), audio %.3g (rel %.3g)\n",
                t[0], t[1], dv, dv / rv, da, da / ra);
    worst = std::max({worst, dv / rv, da / ra});
    EXPECT_GT(dv, 0.0) << "the interpolation error is not observed";
  }
  // Linear interpolation of the curve between nodes 1/64 apart: measured at most 8.8e-6
  // relative (max |diff| / max |full|, max |diff| 3.7e-5) on these timesteps.
  EXPECT_LE(worst, 3e-5);
}

TEST(AdalnCurve, PublishedShapesInWeightSpecs) {
  H3Config c = H3Config::h3();
  c.layers = 2;
  c.adaln_curve_grid = 1025;
  c.adaln_curve_rank = 8;
  std::map<std::string, Shape> specs;
  for (const auto& s : model::weight_specs(c)) specs[s.key] = s.shape;
  EXPECT_EQ(specs.at("adaln_t_table"), (Shape{1025, 8}));
  EXPECT_EQ(specs.at("blocks.1.adaln_proj.linear.weight"), (Shape{96768, 8}));
  EXPECT_EQ(specs.at("blocks.1.adaln_proj.linear.bias"), (Shape{96768}));
  EXPECT_EQ(specs.at("final_layer.adaln_proj.linear.weight"), (Shape{10752, 8}));
  for (const auto& [k, s] : specs) EXPECT_EQ(k.rfind("time_embedder.", 0), std::string::npos) << k;
  EXPECT_TRUE(model::is_adaln_curve_key(c, "blocks.0.adaln_proj.linear.weight"));
  EXPECT_FALSE(model::is_adaln_curve_key(c, "blocks.0.attn.qkv_proj.weight"));
}

// The golden weights with a published-shaped curve: table [1025, 8] f32, AdaLN linears
// [18H, 8] / [2H, 8] stored f16 (as the published pruned files store them).
std::string published_like_file(const std::string& name, int64_t grid, int64_t table_rank,
                                int64_t weight_rank, bool keep_time_embedder = false,
                                bool table_1d = false) {
  const SafetensorsFile f = SafetensorsFile::open(test::golden_weights());
  NamedTensors out;
  for (const auto& e : f.entries())
    if (!test::is_adaln_key(e.name) || (keep_time_embedder && e.name.rfind("time_", 0) == 0))
      out.emplace_back(e.name, f.get(e.name));
  auto values = [](int64_t n, float scale) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37f * float(i) + 0.1f);
    return v;
  };
  if (table_1d)
    out.emplace_back("adaln_t_table", tensor_from_f32(values(grid, 1.0f), {grid}));
  else
    out.emplace_back("adaln_t_table",
                     tensor_from_f32(values(grid * table_rank, 1.0f), {grid, table_rank}));
  const int64_t H = 192;
  for (const auto& [name, rows] : {std::pair{std::string("blocks.0"), 18 * H},
                                   {std::string("blocks.1"), 18 * H},
                                   {std::string("final_layer"), 2 * H}}) {
    out.emplace_back(
        name + ".adaln_proj.linear.weight",
        tensor_from_f32(values(rows * weight_rank, 0.1f), {rows, weight_rank}, DType::f16));
    out.emplace_back(name + ".adaln_proj.linear.bias",
                     tensor_from_f32(values(rows, 0.05f), {rows}, DType::f16));
  }
  const std::string path = tmp(name);
  write_safetensors(path, out);
  return path;
}

TEST(AdalnCurve, PublishedLayoutLoadsAndRuns) {
  const std::string path = published_like_file("published.safetensors", 1025, 8, 8);
  const H3Model m = load_model(path);
  EXPECT_EQ(m.config.adaln_curve_grid, 1025);
  EXPECT_EQ(m.config.adaln_curve_rank, 8);
  EXPECT_EQ(m.weights.blocks[1].adaln.in, 8);
  EXPECT_EQ(m.weights.blocks[1].adaln.out, 18 * 192);
  // f16 storage: the values are the stored halves, exactly.
  const SafetensorsFile f = SafetensorsFile::open(path);
  const std::vector<float> stored = f.get("blocks.1.adaln_proj.linear.weight").to_f32();
  EXPECT_EQ(
      std::vector<float>(m.weights.blocks[1].adaln.w.begin(), m.weights.blocks[1].adaln.w.end()),
      stored);
  const ForwardInputs in = test::golden_inputs().inputs();
  for (Precision prec : {Precision::fp32, Precision::bf16}) {
    const ForwardOutputs o = forward_cpu(m, in, prec);
    ASSERT_FALSE(o.video_velocity.empty());
    for (float v : o.video_velocity) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(AdalnCurve, MalformedTablesAreErrorsNamingFileAndKey) {
  struct Case {
    std::string file, want;
    int64_t grid, table_rank, weight_rank;
    bool time_embedder = false, table_1d = false;
  };
  const std::vector<Case> cases = {
      {"rank1.safetensors", "'adaln_t_table' has shape [1025], expected [grid, rank]", 1025, 8, 8,
       false, true},
      {"kmismatch.safetensors",
       "key 'blocks.0.adaln_proj.linear.weight' in " + tmp("kmismatch.safetensors") +
           " has shape [3456, 7], expected [3456, 8]",
       1025, 8, 7},
      {"grid1.safetensors", "'adaln_t_table' has shape [1, 8], expected >= 2 grid rows", 1, 8, 8},
      {"both.safetensors", "holds both 'adaln_t_table' (curve-form AdaLN) and 'time_embedder.*'",
       1025, 8, 8, true},
  };
  for (const Case& c : cases) {
    const std::string path = published_like_file(c.file, c.grid, c.table_rank, c.weight_rank,
                                                 c.time_embedder, c.table_1d);
    const std::string msg = load_error(path);
    EXPECT_NE(msg.find(path), std::string::npos) << c.file << ": " << msg;
    EXPECT_NE(msg.find(c.want), std::string::npos) << c.file << ": " << msg;
  }
}

// "adaln fit error at <what> (<n> timesteps): max abs <a>, rel L2 <b>"
CurveFitError parse_error(const std::string& out, const std::string& what) {
  const std::regex re("adaln fit error at " + what +
                      " \\((\\d+) timesteps\\): max abs ([^,]+), rel L2 (\\S+)");
  std::smatch m;
  EXPECT_TRUE(std::regex_search(out, m, re)) << out;
  if (m.empty()) return {};
  return {std::stod(m[2]), std::stod(m[3]), std::stoll(m[1])};
}

// The fit error recomputed from the two files: every AdaLN output (blocks and final layer) of
// the full model, silu(TE(t)) through its linears, against the curve file's interpolated rows
// through its linears, at the nodes t_i = i / (grid - 1) and the midpoints between them.
std::pair<CurveFitError, CurveFitError> recompute_error(const H3Model& full, const H3Model& curve) {
  const int64_t G = curve.config.adaln_curve_grid, R = curve.config.adaln_curve_rank;
  std::vector<float> nodes, mids;
  for (int64_t i = 0; i < G; ++i) {
    nodes.push_back(float(double(i) / double(G - 1)));
    if (i + 1 < G) mids.push_back(float((i + 0.5) / double(G - 1)));
  }
  auto measure = [&](const std::vector<float>& t) {
    const int64_t P = int64_t(t.size());
    const std::vector<float> g = test::silu_temb(full, t);
    std::vector<float> e(P * R);
    ops::adaln_curve_embed_cpu({curve.weights.adaln_t_table.data(), t.data(), e.data(), G, R, P});
    double mx = 0, d2 = 0, r2 = 0;
    auto layer = [&](const LinearWeight& a, const LinearWeight& b) {
      std::vector<float> ya(P * a.out), yb(P * b.out);
      ops::linear_cpu({.x = g.data(),
                       .w = a.w.data(),
                       .bias = a.b.data(),
                       .y = ya.data(),
                       .rows = P,
                       .in = a.in,
                       .out = a.out});
      ops::linear_cpu({.x = e.data(),
                       .w = b.w.data(),
                       .bias = b.b.data(),
                       .y = yb.data(),
                       .rows = P,
                       .in = b.in,
                       .out = b.out});
      for (size_t i = 0; i < ya.size(); ++i) {
        const double d = double(yb[i]) - ya[i];
        mx = std::max(mx, std::fabs(d));
        d2 += d * d;
        r2 += double(ya[i]) * ya[i];
      }
    };
    for (size_t i = 0; i < full.weights.blocks.size(); ++i)
      layer(full.weights.blocks[i].adaln, curve.weights.blocks[i].adaln);
    layer(full.weights.final_adaln, curve.weights.final_adaln);
    return CurveFitError{mx, std::sqrt(d2 / r2), P};
  };
  return {measure(nodes), measure(mids)};
}

TEST(AdalnCurve, PruneAdalnCliWritesALoadableFileWithTheErrorItPrints) {
  const H3Model full = load_model(test::golden_weights());
  for (const int64_t rank : {8, 97}) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::string out = tmp("pruned_" + std::to_string(rank) + ".safetensors");
    const CliRun r = run_cli("prune-adaln --in " + test::golden_weights() + " --out " + out +
                                 " --grid 129 --rank " + std::to_string(rank),
                             false);
    ASSERT_EQ(r.status, 0) << r.output;
    std::printf("%s", r.output.c_str());
    const CurveFitError pn = parse_error(r.output, "grid nodes"),
                        pm = parse_error(r.output, "midpoints");
    const H3Model curve = load_model(out);
    EXPECT_EQ(curve.config.adaln_curve_grid, 129);
    EXPECT_EQ(curve.config.adaln_curve_rank, rank);
    const auto [rn, rm] = recompute_error(full, curve);
    EXPECT_EQ(pn.points, 129);
    EXPECT_EQ(pm.points, 128);
    for (const auto& [printed, recomputed] : {std::pair{pn, rn}, std::pair{pm, rm}}) {
      EXPECT_NEAR(printed.max_abs, recomputed.max_abs, 1e-8 * recomputed.max_abs + 1e-30);
      EXPECT_NEAR(printed.rel_l2, recomputed.rel_l2, 1e-8 * recomputed.rel_l2 + 1e-30);
    }
    if (rank == 97) {
      EXPECT_EQ(rn.max_abs, 0.0) << "the exact basis is exact at grid nodes";
    } else {
      EXPECT_GT(rn.max_abs, 0.0);  // a rank-8 basis of a 96-dim curve is not exact
    }
    // Measured (129-row grid): rank 8 rel L2 6.9e-8 at nodes (the tiny curve is nearly rank
    // 8) and 1.6e-6 at midpoints; rank 97: 0 and 1.6e-6 (interpolation only).
    EXPECT_LT(rm.rel_l2, 1e-5);
    const ForwardOutputs o = forward_cpu(curve, test::golden_inputs().inputs(), Precision::fp32);
    const ForwardOutputs ref = forward_cpu(full, test::golden_inputs().inputs(), Precision::fp32);
    double rv = 0;
    const double dv = max_abs_diff(o.video_velocity, ref.video_velocity, &rv);
    std::printf("rank %lld: forward video max abs vs full %.3g (rel %.3g)\n", (long long)rank, dv,
                dv / rv);
    EXPECT_LT(dv / rv, 1e-5);  // measured 1.2e-6 at the golden timesteps
  }
}

TEST(AdalnCurve, CliInfoNamesTheVariantAndPddNeedsTheSchedule) {
  exact_pair();
  CliRun r = run_cli("info " + tmp("exact_curve.safetensors"));
  ASSERT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("AdaLN: pruned curve form (adaln_t_table grid 65, rank 97"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("output heads: plain"), std::string::npos) << r.output;
  r = run_cli("info " + test::golden_weights());
  EXPECT_NE(r.output.find("AdaLN: full (time embedder 256 -> 192 -> 96"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("to_gate_compress"), std::string::npos) << r.output;

  const std::string pdd = tmp("pdd_cli.safetensors");
  test::write_pdd_file(pdd, 4);
  r = run_cli("info " + pdd);
  EXPECT_NE(r.output.find("output heads: PDD head bank, n = 4"), std::string::npos) << r.output;
  const std::string golden = test::golden_dir() + "/golden.safetensors";
  const std::string out = tmp("pdd_forward.safetensors");
  r = run_cli("forward --checkpoint " + pdd + " --inputs " + golden + " --out " + out, true);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("PDD head bank (n=4) needs the sampler's sigma schedule"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(
      run_cli("forward --steps 8 --checkpoint " + pdd + " --inputs " + golden + " --out " + out)
          .status,
      0);
  EXPECT_EQ(run_cli("sample --steps 2 --checkpoint " + pdd + " --out " + out).status, 0);

  const SafetensorsFile f = SafetensorsFile::open(test::golden_weights());
  NamedTensors t;
  for (const auto& e : f.entries()) t.emplace_back(e.name, f.get(e.name));
  for (const char* k :
       {"blocks.0.attn.to_gate_compress.weight", "blocks.1.attn.to_gate_compress.weight"})
    t.emplace_back(k, Tensor::zeros(DType::bf16, {256, 192}));
  write_safetensors(tmp("vsa_cli.safetensors"), t);
  r = run_cli("info " + tmp("vsa_cli.safetensors"));
  EXPECT_NE(r.output.find("attn.to_gate_compress: present in 2 blocks"), std::string::npos)
      << r.output;
}

TEST(AdalnCurve, PruneAdalnRefusesACurveFile) {
  const std::string in = tmp("exact_curve.safetensors");
  exact_pair();  // writes it
  const CliRun r = run_cli("prune-adaln --in " + in + " --out " + tmp("again.safetensors"));
  EXPECT_EQ(r.status, 1);
}

}  // namespace
}  // namespace h3rt
