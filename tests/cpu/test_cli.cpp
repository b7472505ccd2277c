// End-to-end checks of the h3rt binary: golden trajectory and forward, and clean failures.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "h3rt/safetensors.h"
#include "test_util.h"

namespace h3rt {
namespace {

using test::CliRun;
using test::run_cli;

namespace fs = std::filesystem;

// One folder per test process (ctest runs tests in parallel processes, and two of them writing
// the same file name raced in the atomic writer's rename), removed when the process exits.
std::string tmp(const std::string& name) {
  static const test::TempDir dir("h3rt_cli_tests");
  return dir.file(name);
}

// max |a - b| / max |b|
double rel_max_err(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

const std::string kWeights = test::golden_dir() + "/weights.safetensors";
const std::string kGolden = test::golden_dir() + "/golden.safetensors";

TEST(Cli, SampleReproducesGoldenTrajectoryFp32) {
  std::string out = tmp("traj.safetensors"), report = tmp("traj.json");
  CliRun r = run_cli("sample --checkpoint " + kWeights + " --inputs " + kGolden +
                     " --steps 2 --precision fp32 --out " + out + " --report " + report);
  ASSERT_EQ(r.status, 0) << r.output;
  SafetensorsFile ours = SafetensorsFile::open(out), gold = SafetensorsFile::open(kGolden);
  Tensor v = ours.get("video_latents"), a = ours.get("audio_latents");
  Tensor gv = gold.get("traj_f32/final_video_latents"),
         ga = gold.get("traj_f32/final_audio_latents");
  EXPECT_EQ(v.shape(), gv.shape());
  EXPECT_EQ(a.shape(), ga.shape());
  EXPECT_LE(rel_max_err(v.to_f64(), gv.to_f64()), 1e-5);
  EXPECT_LE(rel_max_err(a.to_f64(), ga.to_f64()), 1e-5);
  std::ifstream rep(report);
  std::string text((std::istreambuf_iterator<char>(rep)), std::istreambuf_iterator<char>());
  for (const char* key : {"\"denoiser\"", "\"sampler_update\"", "\"checksums\"", "\"packing\"",
                          "\"output_transform\"", "\"peak_memory_bytes\""})
    EXPECT_NE(text.find(key), std::string::npos) << key;
}

TEST(Cli, ForwardMatchesFloat64Reference) {
  std::string out = tmp("fwd.safetensors");
  CliRun r = run_cli("forward --checkpoint " + kWeights + " --inputs " + kGolden + " --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  SafetensorsFile ours = SafetensorsFile::open(out), gold = SafetensorsFile::open(kGolden);
  EXPECT_LE(
      rel_max_err(ours.get("video_velocity").to_f64(), gold.get("fwd_f64/video_velocity").to_f64()),
      1e-5);
  EXPECT_LE(
      rel_max_err(ours.get("audio_velocity").to_f64(), gold.get("fwd_f64/audio_velocity").to_f64()),
      1e-5);
}

TEST(Cli, TinyPresetRunsWithNoFiles) {
  std::string out = tmp("tiny.safetensors");
  CliRun r = run_cli("sample --steps 2 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  Tensor v = SafetensorsFile::open(out).get("video_latents");
  EXPECT_EQ(v.shape(), (Shape{1, 24, 7, 8, 12}));
  for (double x : v.to_f64()) ASSERT_TRUE(std::isfinite(x));
  // Same seed, same latents.
  std::string out2 = tmp("tiny2.safetensors");
  ASSERT_EQ(run_cli("sample --steps 2 --out " + out2).status, 0);
  EXPECT_EQ(SafetensorsFile::open(out2).get("video_latents").to_f64(), v.to_f64());
}

TEST(Cli, CorruptCheckpointIsOneLineErrorAndNonZeroExit) {
  std::ifstream in(kWeights, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string truncated = tmp("truncated.safetensors"), garbage = tmp("garbage.safetensors");
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() - 1000);
  std::string g = bytes;
  for (size_t i = 8; i < 200; ++i) g[i] = '\x7f';  // destroy the JSON header
  std::ofstream(garbage, std::ios::binary) << g;
  for (const std::string& f : {truncated, garbage}) {
    for (const std::string& verb :
         {"forward --checkpoint " + f + " --inputs " + kGolden + " --out " + tmp("x.st"),
          "sample --checkpoint " + f + " --steps 1 --out " + tmp("y.st"), "info " + f}) {
      CliRun r = run_cli(verb);
      EXPECT_EQ(r.status, 1) << verb << "\n" << r.output;
      EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
      EXPECT_NE(r.output.find(f), std::string::npos) << r.output;
    }
  }
}

TEST(Cli, RejectsBadShapesWithClearMessages) {
  CliRun r = run_cli("sample --frames 20 --out " + tmp("z.st"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("nearest valid counts: 18 and 22"), std::string::npos) << r.output;
  r = run_cli("sample --width 100 --out " + tmp("z.st"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("multiples of 32"), std::string::npos) << r.output;
  r = run_cli("sample --preset h3 --checkpoint " + kWeights);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("not both"), std::string::npos) << r.output;
  r = run_cli("sample --attention sage --device cpu --out " + tmp("z.st"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--attention sage runs on the GPU only"), std::string::npos) << r.output;
}

// Output paths are checked before any work: a run never ends in "cannot create".
TEST(Cli, OutputPathsAreCheckedFirst) {
  const std::string missing = tmp("no_such_folder") + "/x.st";
  for (const std::string& verb :
       {"sample --steps 1 --out " + missing,
        "sample --steps 1 --out " + tmp("ok.st") + " --report " + missing,
        "forward --checkpoint " + kWeights + " --inputs " + kGolden + " --out " + missing,
        "quantize-nvfp4 --in " + kGolden + " --out " + missing}) {
    CliRun r = run_cli(verb);
    EXPECT_EQ(r.status, 1) << verb << "\n" << r.output;
    EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("denoising"), std::string::npos) << "ran before failing: " << r.output;
  }
  CliRun r = run_cli("sample --steps 0 --out " + tmp("z.st"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--steps must be in [1, 1000], got 0"), std::string::npos) << r.output;
}

// Users read the message alone; the failed check's source file and line only on request.
TEST(Cli, ErrorsNameSourceLocationsOnlyOnRequest) {
  const std::string missing = tmp("no_such_file.safetensors");
  for (const char* how : {"", "--verbose ", "env"}) {
    SCOPED_TRACE(how);
    const std::string env = std::string(how) == "env" ? "H3RT_DEBUG=1 " : "";
    const std::string flag = env.empty() ? how : "";
    const std::string cmd =
        env + std::string(H3RT_CLI_PATH) + " " + flag + "info " + missing + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    EXPECT_EQ(WEXITSTATUS(pclose(p)), 1) << out;
    EXPECT_NE(out.find(missing), std::string::npos) << "the file is named: " << out;
    const bool located = out.find(".cpp:") != std::string::npos;
    EXPECT_EQ(located, std::string(how) != "") << out;
  }
}

}  // namespace
}  // namespace h3rt
