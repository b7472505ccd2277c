// The SVG pictures of bench reports (src/bench/plot.h), from reports built here and from reports
// measured on the H200 and stored in bench/raw: well-formed XML, one bar or segment per
// component or stage and series, the labels, and `bench compare --plot` through the CLI.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "bench/block_report.h"
#include "bench/plot.h"
#include "bench/step_report.h"
#include "h3rt/check.h"
#include "h3rt/compare.h"
#include "h3rt/report.h"
#include "test_util.h"

namespace h3rt {
namespace {

// Tags balance and nest, attribute values are quoted, '&' starts an entity: enough of XML's
// well-formedness for what the plots write.
bool well_formed(const std::string& s, std::string& why) {
  std::vector<std::string> open;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '&') {
      const size_t semi = s.find(';', i);
      const std::string ent = s.substr(i, semi == std::string::npos ? 0 : semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;")
        return why = "bad entity at " + std::to_string(i), false;
      continue;
    }
    if (s[i] == '>') return why = "stray > at " + std::to_string(i), false;
    if (s[i] != '<') continue;
    size_t j = i + 1;
    bool quoted = false;
    for (; j < s.size() && (quoted || s[j] != '>'); ++j)
      if (s[j] == '"')
        quoted = !quoted;
      else if (!quoted && s[j] == '<')
        return why = "< inside a tag at " + std::to_string(j), false;
    if (j == s.size()) return why = "unterminated tag", false;
    const std::string tag = s.substr(i + 1, j - i - 1);
    i = j;
    if (tag[0] == '?') continue;
    const bool closing = tag[0] == '/', empty = tag.back() == '/';
    const std::string name = tag.substr(closing, tag.find_first_of(" /", closing) - closing);
    if (closing) {
      if (open.empty() || open.back() != name) return why = "mismatched </" + name + ">", false;
      open.pop_back();
    } else if (!empty) {
      open.push_back(name);
    }
  }
  if (!open.empty()) return why = "unclosed <" + open.back() + ">", false;
  return true;
}

int count(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

#define EXPECT_WELL_FORMED(svg)                              \
  do {                                                       \
    std::string why;                                         \
    EXPECT_TRUE(well_formed(svg, why)) << why;               \
    EXPECT_EQ((svg).rfind("<?xml", 0), 0u);                  \
    EXPECT_NE((svg).find("<svg xmlns="), std::string::npos); \
  } while (0)

TEST(Plot, TheCheckerRejectsBrokenXml) {
  std::string why;
  EXPECT_FALSE(well_formed("<svg><rect></svg>", why));
  EXPECT_FALSE(well_formed("<svg><text>a & b</text></svg>", why));
  EXPECT_FALSE(well_formed("<svg><text x=\"1>2\">a</text>", why));
  EXPECT_TRUE(well_formed("<?xml v?><svg><rect a=\"x>y\"/><text>&lt;</text></svg>", why));
}

nlohmann::json block_report_with_telemetry() {
  bench::BlockMeasurements m;
  double ms = 0.25;
  for (const auto& name : bench::block_components()) m.component_ms[name] = {ms *= 2};
  m.instrumented_ms = {300.0};
  m.uninstrumented_ms = {290.0};
  m.graph_ms = {289.0};
  m.device.name = "Test <GPU> & co";  // escaped in the title
  m.telemetry.header = {{"available", true}, {"source", "fake"}};
  m.telemetry.components["attention"] = {3, 1725, 1500, 650, 1.0};
  m.telemetry.block = {10, 1800, 1500, 600, 0.5};
  m.telemetry.block_energy = {0.0, 348000.0, 2};
  return bench::block_report(H3Config::tiny(), make_t2va_layout(10, 9, 7, 8, 12), m);
}

TEST(Plot, BlockBreakdownOneBarPerComponentWithSeedNames) {
  nlohmann::json r = block_report_with_telemetry();
  r["peer"] = {{"what", "eager PyTorch"},
               {"block_ms", 400.0},
               {"components_ms", {{"attention", 200.0}, {"swiglu", 3.0}, {"norm_modulate", 1.0}}}};
  const std::string svg = bench::plot_report_svg(r);
  EXPECT_WELL_FORMED(svg);
  const int components = static_cast<int>(bench::block_components().size());
  EXPECT_EQ(count(svg, "class=\"bar\""), components + 1 + 3 + 1);  // + block totals
  EXPECT_EQ(count(svg, "data-series=\"h3rt\""), components + 1);
  EXPECT_EQ(count(svg, "data-series=\"peer: eager PyTorch\""), 4);
  for (const auto& name : bench::block_components())
    EXPECT_EQ(count(svg, "data-component=\"" + name + "\""),
              name == "attention" || name == "swiglu" || name == "norm_modulate" ? 2 : 1)
        << name;
  EXPECT_NE(svg.find("norm_modulate  [seeds: norm + modulate]"), std::string::npos);
  EXPECT_NE(svg.find("[seeds: residual_gates + norm + modulate]"), std::string::npos);
  EXPECT_NE(svg.find("Test &lt;GPU&gt; &amp; co"), std::string::npos);
  EXPECT_NE(svg.find("1725 MHz, 650 W"), std::string::npos);           // attention's samples
  EXPECT_NE(svg.find("1800 MHz, 600 W, 174.0 J"), std::string::npos);  // the block's energy
  EXPECT_NE(svg.find("290.0 ms"), std::string::npos);
}

bench::StepRepetition rep(double wall) {
  bench::StepRepetition r;
  r.wall_ms = wall;
  r.device_ms = wall - 5;
  r.host_prepare_ms = 3;
  r.host_finish_ms = 2;
  return r;
}

nlohmann::json step_report() {
  bench::StepMeasurements m;
  m.preset = "tiny";
  m.eager = {rep(100), rep(110)};
  for (auto& r : m.eager)
    r.stage_ms = {{"inputs", 1}, {"adaln_tables", 4}, {"blocks", 85}, {"final_heads", 2}};
  m.graph = {rep(90), rep(91)};
  m.graph_captured = true;
  return bench::step_report(H3Config::tiny(), make_t2va_layout(10, 9, 7, 8, 12), m);
}

TEST(Plot, StepTimelineSegmentsPerStage) {
  const std::string svg = bench::plot_report_svg(step_report());
  EXPECT_WELL_FORMED(svg);
  // eager: host_prepare, 4 stages, the rest of the wall time; graph: host, graph, rest
  EXPECT_EQ(count(svg, "class=\"segment\""), 6 + 3);
  for (const char* s : {"host_prepare", "inputs", "adaln_tables", "blocks", "final_heads",
                        "launch + copy out (host)", "graph (device)"})
    EXPECT_GE(count(svg, "data-stage=\"" + std::string(s) + "\""), 1) << s;
  EXPECT_NE(svg.find("eager step"), std::string::npos);
  EXPECT_NE(svg.find("CUDA graph step"), std::string::npos);
  EXPECT_NE(svg.find("data-ms=\"85.0000\""), std::string::npos);
  EXPECT_NE(svg.find("data-ms=\"15.0000\""), std::string::npos);  // 110 - (3 + 1 + 4 + 85 + 2)
}

TEST(Plot, SampleTimelineEveryStepsStages) {
  SampleReport s;
  s.steps = 2;
  s.stages.resize(2);
  s.stages[0] = {0.01, 1.5, 0.0, 0.002};
  s.stages[1] = {0.01, 1.4, 0.003, 0.002};
  const std::string svg = bench::plot_report_svg(to_json(s));
  EXPECT_WELL_FORMED(svg);
  EXPECT_EQ(count(svg, "class=\"segment\""), 8);
  EXPECT_EQ(count(svg, "data-stage=\"denoiser\""), 2);
}

std::string raw(const std::string& name) {
  return std::string(H3RT_SOURCE_DIR) + "/bench/raw/" + name;
}

// Reports measured on the H200 (bench/raw): ours against the eager PyTorch peer of the same run.
TEST(Plot, StoredReportsAndPeerSideBySide) {
  const nlohmann::json ours = read_json(raw("block_fp8_1344_h200_20261201_s10_call3.json"));
  const nlohmann::json peer = read_json(raw("peer_torch_fp8_seed_h200_20261201_s9.json"));
  const std::string one = bench::plot_report_svg(ours);
  EXPECT_WELL_FORMED(one);
  EXPECT_EQ(count(one, "class=\"bar\""), 11);  // 10 components + the block
  const std::string both = bench::plot_comparison_svg(ours, "h3rt", peer, "torch");
  EXPECT_WELL_FORMED(both);
  EXPECT_EQ(count(both, "data-series=\"h3rt\""), 11);
  EXPECT_EQ(count(both, "data-series=\"torch\""), 10);  // 9 components + the block
  EXPECT_NE(both.find("99.78 ms"), std::string::npos);  // the peer's block_ms

  nlohmann::json with_peer = ours;
  with_peer["peer"] = bench::peer_for_block_report(peer, "peer.json", "fp8");
  EXPECT_EQ(count(bench::plot_report_svg(with_peer), "class=\"bar\""), 21);
}

TEST(Plot, RejectsWhatItCannotDraw) {
  EXPECT_THROW(bench::plot_report_svg(nlohmann::json::object(), "x.json"), Error);
  try {
    bench::plot_comparison_svg(block_report_with_telemetry(), "a.json", step_report(), "b.json");
    FAIL() << "a block against a step must not draw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a.json and b.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(bench::peer_for_block_report(step_report(), "s.json", "fp8"), Error);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Plot, CompareWritesThePicture) {
  const test::TempDir dir("h3rt_plot");
  const std::string a = dir.file("a.json"), b = dir.file("b.json"), svg = dir.file("ab.svg");
  write_json(a, step_report());
  write_json(b, step_report());
  const test::CliRun r = test::run_cli("bench compare " + a + " " + b + " --plot " + svg);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string text = read_text(svg);
  EXPECT_WELL_FORMED(text);
  EXPECT_EQ(count(text, "class=\"segment\""), 2 * 9);
  EXPECT_NE(text.find("a.json: eager step"), std::string::npos);
  EXPECT_NE(text.find("b.json: CUDA graph step"), std::string::npos);
  // Ours against the peer's JSON: no timing field in common, the picture alone.
  const std::string bars = dir.file("bars.svg");
  const test::CliRun peer =
      test::run_cli("bench compare " + raw("block_fp8_1344_h200_20261201_s10_call3.json") + " " +
                    raw("peer_torch_fp8_seed_h200_20261201_s9.json") + " --plot " + bars);
  ASSERT_EQ(peer.status, 0) << peer.output;
  EXPECT_NE(peer.output.find("wrote the picture only"), std::string::npos) << peer.output;
  EXPECT_EQ(count(read_text(bars), "class=\"bar\""), 21);
  const test::CliRun bad =
      test::run_cli("bench compare " + a + " " + b + " --plot " + dir.file("no/such/dir.svg"));
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("--plot"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace h3rt
