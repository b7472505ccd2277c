// Every CLI verb's bad-option and bad-file paths, through the h3rt binary: exit code 1, a
// message naming the option or file, and no source location (those need --verbose).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "h3rt/device.h"
#include "test_util.h"

namespace h3rt {
namespace {

using test::CliRun;
using test::run_cli;

std::string tmp(const std::string& name) {
  static const test::TempDir dir("h3rt_cli_errors");
  return dir.file(name);
}

// A file that is not safetensors (and not JSON): 64 bytes of text.
std::string garbage_file() {
  const std::string p = tmp("garbage.safetensors");
  std::ofstream(p) << "this is not a safetensors file; it only has some text in it......\n";
  return p;
}

const std::string kWeights = test::golden_dir() + "/weights.safetensors";
const std::string kGolden = test::golden_dir() + "/golden.safetensors";

bool names_source_location(const std::string& out) {
  for (const char* ext : {".cpp:", ".cu:", ".h:", ".cuh:"})
    if (out.find(ext) != std::string::npos) return true;
  return false;
}

// Runs `args`, expecting exit 1, `needle` in the output and no source location.
void expect_error(const std::string& args, const std::string& needle) {
  SCOPED_TRACE(args);
  const CliRun r = run_cli(args);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "expected '" << needle << "' in:\n"
                                                      << r.output;
  EXPECT_FALSE(names_source_location(r.output)) << r.output;
}

const std::string kInt8 = test::shared_dir() + "/golden/int8_convrot/m9_k256_n24_g16.safetensors";

// Every verb and sub-verb of `h3rt --help` / `h3rt bench --help`, with the arguments it needs to
// get past its required options (valid files, outputs in the temp folder).
std::vector<std::pair<std::string, std::string>> verbs() {
  return {{"sample", ""},
          {"forward", "--checkpoint " + kWeights + " --inputs " + kGolden + " --out " + tmp("f")},
          {"info", kWeights},
          {"compare", kWeights + " " + kWeights},
          {"selftest", ""},
          {"quantize-nvfp4", "--in " + kGolden + " --out " + tmp("n")},
          {"quantize-checkpoint", "--in " + kWeights + " --out " + tmp("q") + " --format fp8"},
          {"int8-convrot", "--in " + kInt8 + " --out " + tmp("i")},
          {"prune-adaln", "--in " + kWeights + " --out " + tmp("p")},
          {"make-lora", "--out " + tmp("l")},
          {"bench block", ""},
          {"bench step", ""},
          {"bench sample", ""},
          {"bench compare", kWeights + " " + kWeights},
          {"bench load", kWeights},
          {"bench attention", ""},
          {"bench quantize-nvfp4", ""},
          {"bench kernels", ""},
          {"bench nvfp4-gemm", ""},
          {"bench nvfp4-fusion", ""},
          {"bench int8-gemm", ""},
          {"bench gemm-algos", ""},
          {"bench lora-merge", ""}};
}

// The subcommand names of a CLI11 help text ("Subcommands:" then "  name   description").
std::vector<std::string> listed(const std::string& help, const std::string& prefix) {
  std::vector<std::string> names;
  const size_t sub = help.find("Subcommands:");
  if (sub == std::string::npos) return names;
  size_t pos = help.find('\n', sub);
  while (pos != std::string::npos && pos + 1 < help.size()) {
    const size_t end = help.find('\n', pos + 1);
    const std::string line = help.substr(pos + 1, end - pos - 1);
    if (line.rfind("  ", 0) == 0 && line.size() > 2 && line[2] != ' ')
      names.push_back(prefix + line.substr(2, line.find(' ', 2) - 2));
    pos = end;
  }
  return names;
}

TEST(CliErrors, HelpListsEveryVerbTested) {
  const CliRun top = run_cli("--help", false), bench = run_cli("bench --help", false);
  ASSERT_EQ(top.status, 0) << top.output;
  ASSERT_EQ(bench.status, 0) << bench.output;
  std::vector<std::string> all = listed(top.output, "");
  for (const std::string& b : listed(bench.output, "bench ")) all.push_back(b);
  EXPECT_GE(all.size(), 17u) << top.output << bench.output;
  const auto tested = verbs();
  for (const std::string& v : all) {
    if (v == "bench") continue;
    EXPECT_TRUE(
        std::any_of(tested.begin(), tested.end(), [&](const auto& t) { return t.first == v; }))
        << "verb '" << v << "' of --help has no error-path test here";
  }
}

TEST(CliErrors, UnknownOptionOfEveryVerb) {
  for (const auto& [verb, args] : verbs())
    expect_error(verb + " " + args + " --no-such-option", "not expected: --no-such-option");
  expect_error("no-such-verb", "A subcommand is required");
  expect_error("bench no-such-bench", "A subcommand is required");
}

// The NVFP4 mainloop kernels were retired (#18): their bench flag is gone, and says so.
TEST(CliErrors, RetiredNvfp4MainloopFlag) {
  expect_error("bench nvfp4-gemm --no-mainloop", "not expected: --no-mainloop");
}

#ifndef H3RT_HAVE_CUDA
// A CPU-only build names what is missing for every GPU benchmark.
TEST(CliErrors, GpuVerbsOfACpuBuild) {
  for (const auto& [verb, args] : verbs())
    if (verb.rfind("bench ", 0) == 0 && verb != "bench compare" && verb != "bench load")
      expect_error(verb, "CUDA");
}
#endif

#ifdef H3RT_HAVE_CUDA
// A CUDA build on a machine without a usable GPU (CI's): every GPU benchmark says which verb
// needs the device and why none is usable, with no CUDA call site in the message.
TEST(CliErrors, GpuVerbsWithoutAGpu) {
  if (cuda_current_device() >= 0) GTEST_SKIP() << "a CUDA device is present: the benches would run";
  for (const auto& [verb, args] : verbs())
    if (verb.rfind("bench ", 0) == 0 && verb != "bench compare" && verb != "bench load")
      expect_error(verb, verb + " needs a CUDA device, and no CUDA device is available (");
  expect_error("bench attention --inputs " + kGolden + " --outputs " + tmp("a.safetensors"),
               "bench attention --inputs needs a CUDA device");
  expect_error("sample --device cuda", "device cuda: no CUDA device is available (");
}

// --sustain takes a finite number of seconds >= 0, and says so in those words.
TEST(CliErrors, SustainSeconds) {
  for (const char* verb : {"bench block", "bench attention"}) {
    expect_error(std::string(verb) + " --sustain -1", "must be a finite number >= 0, got -1");
    expect_error(std::string(verb) + " --sustain nan", "must be a finite number >= 0, got nan");
  }
}
#endif

// device memory limit auto: info and the bench verbs resolve it from the GPU's free memory
// when they read their options; without a GPU they ask for a size.
TEST(CliErrors, DeviceMemoryLimitAuto) {
  if (cuda_current_device() >= 0) GTEST_SKIP() << "a CUDA device is present: auto resolves";
  expect_error("info " + test::golden_dir() + "/weights.safetensors --device-memory-limit auto",
               "give a size (e.g. 24GB)");
#ifdef H3RT_HAVE_CUDA
  for (const char* verb : {"step", "sample"})
    expect_error(std::string("bench ") + verb + " --preset tiny --device-memory-limit auto",
                 "free memory, and no CUDA device is available (");
#endif
}

// selftest without a GPU: exit 1, naming what is missing.
TEST(CliErrors, SelftestWithoutAGpu) {
  expect_error("selftest --json /no/such/folder/r.json", "--json");
  if (cuda_current_device() >= 0) GTEST_SKIP() << "a CUDA device is present: the check would run";
#ifdef H3RT_HAVE_CUDA
  expect_error("selftest", "selftest: no CUDA device is available");
#else
  expect_error("selftest", "built without CUDA");
#endif
}

// bench step --device-io (the C++ figure of tools/device/py_overhead.py): --help says what it
// times and the report keys it adds; without a CUDA device (a CPU build, or a CUDA build on a
// machine without a GPU) it fails naming the need, before any work.
TEST(CliErrors, BenchStepDeviceIo) {
  const CliRun help = run_cli("bench step --help", false);
  ASSERT_EQ(help.status, 0) << help.output;
  for (const char* key : {"--device-io", "forward_request", "forward_ms_per_call_wall",
                          "forward_ms_p50_gpu", "forward_ms_p50_host"})
    EXPECT_NE(help.output.find(key), std::string::npos) << key << " not in:\n" << help.output;
  if (cuda_current_device() >= 0) GTEST_SKIP() << "a CUDA device is present: the bench would run";
#ifdef H3RT_HAVE_CUDA
  expect_error("bench step --preset tiny --device-io --out " + tmp("d.json"),
               "bench step needs a CUDA device, and no CUDA device is available");
#else
  expect_error("bench step --preset tiny --device-io", "built without CUDA");
#endif
}

TEST(CliErrors, BadOptionValues) {
  expect_error("sample --lora /no/such/lora.safetensors:0.5",
               "--lora /no/such/lora.safetensors:0.5: /no/such/lora.safetensors is not a file");
  expect_error("sample --steps 0", "--steps must be in [1, 1000], got 0");
  expect_error("sample --device gpu", "--device");
  expect_error("sample --precision fp16", "--precision");
  expect_error("sample --check-finite sometimes", "--check-finite");
  expect_error("sample --frames 20", "nearest valid counts: 18 and 22");
  expect_error("sample --preset huge", "--preset");
  expect_error("sample --steps many", "--steps");
  expect_error("sample --sparse-attention -1", "--sparse-attention must be in [0, 10]");
  expect_error("sample --sparse-attention nan", "--sparse-attention");
  expect_error("sample --dense-steps -1", "--dense-steps must be in [0, 1000], got -1");
  expect_error("sample --dense-blocks 1001", "--dense-blocks must be in [0, 1000], got 1001");
  expect_error("sample --step-cache -0.5", "--step-cache must be in [0, 100]");
  expect_error("sample --step-cache-max 0", "--step-cache-max must be in [1, 1000], got 0");
  expect_error("sample --sparse-attention 1 --sparse-check -1",
               "--sparse-check must be in [0, 1000] (0: off), got -1");
  expect_error("sample --sparse-check 5",
               "--sparse-check checks the sparse attention: give "
               "--sparse-attention too");
  expect_error("sample --sparse-attention 1 --sparse-check 5 --sparse-check-bound -1",
               "--sparse-check-bound must be in [0, 100], got -1");
  expect_error("sample --gate", "--gate compares the dense run with an approximate one");
  expect_error("sample --gate --step-cache 0.1 --checkpoint-every 2", "--gate runs both");
  expect_error("sample --gemm int4", "--gemm");
  expect_error("make-lora --rank 0 --out " + tmp("l"), "--rank");
  expect_error("make-lora --preset huge --out " + tmp("l"), "--preset");
  expect_error("sample --gemm int8 --int8-group 48", "--int8-group");
  expect_error("sample --gemm int8", "--gemm int8 runs on the GPU only (--device cuda)");
  expect_error("sample --gemm fp8 --device cuda --checkpoint " + kWeights,
               "--gemm fp8 quantizes a preset's synthetic weights (--preset)");
  expect_error("forward --checkpoint " + kWeights + " --inputs " + kGolden + " --out " +
                   tmp("f.st") + " --sigma 2",
               "--sigma: must be a number in [0, 1], got 2");
  expect_error("forward --checkpoint " + kWeights + " --inputs " + kGolden + " --out " +
                   tmp("f.st") + " --audio-shift 0",
               "--audio-shift: must be a finite number > 0, got 0");
  expect_error("quantize-checkpoint --in " + kWeights + " --out " + tmp("q.st") + " --format int4",
               "--format");
  expect_error("quantize-checkpoint --in " + kWeights + " --out " + tmp("q.st") +
                   " --format int8_convrot --group-size 48",
               "48");
  expect_error("prune-adaln --in " + kWeights + " --out " + tmp("p.st") + " --grid 1", "grid");
  expect_error("bench block --gemm int3", "--gemm");
  expect_error("bench step --preset huge", "--preset");
  expect_error("bench sample --cuda-graph maybe", "--cuda-graph");
  expect_error("bench load " + kWeights + " --backend gpu", "--backend");
  expect_error("bench gemm-algos --max-algos 0", "--max-algos");
  expect_error("bench gemm-algos --kinds int4", "--kinds");
  expect_error("quantize-checkpoint --in " + kWeights + " --out " + tmp("q.st") +
                   " --format int8_convrot --layers io,qkv",
               "video_patch_proj");
  expect_error("sample --weight-stream-source disk", "--weight-stream-source");
  expect_error("sample --weight-stream-source file",
               "weight_stream_source file applies when the block weights stream, under a "
               "device_memory_limit");
  // Sizes where 0 would silently mean "the default", and shifts: a finite number > 0.
  for (const std::string& v :
       {"sample --frames 0", "sample --width -32", "sample --height 0", "sample --text-tokens 0",
        "sample --audio-seconds -1", "sample --audio-seconds nan", "sample --shift nan",
        "sample --shift 0", "sample --audio-shift -3", "sample --audio-shift inf",
        "bench block --frames 0", "bench step --width 0", "bench sample --height -32",
        "bench step --reps 0", "bench block --reps -1", "make-lora --pairs 0",
        "int8-convrot --group-size 0"}) {
    const std::string option = v.substr(v.find("--"), v.rfind(' ') - v.find("--"));
    expect_error(v, option + ": must be a finite number > 0, got " + v.substr(v.rfind(' ') + 1));
  }
  for (const std::string& v :
       {"sample --seed -1", "sample --seed 18446744073709551616", "sample --weights-seed -2",
        "bench step --seed -1", "make-lora --seed 1e3"})
    expect_error(v, v.substr(v.find("--"), v.rfind(' ') - v.find("--")) +
                        ": must be an integer in [0, 2^64), got " + v.substr(v.rfind(' ') + 1));
  // --sigma: given, it must lie in [0, 1] (NaN and negative values used to mean "from the file").
  for (const char* bad : {"nan", "-0.5", "1.5"})
    expect_error("forward --checkpoint " + kWeights + " --inputs " + kGolden + " --out " +
                     tmp("f.st") + " --sigma " + bad,
                 std::string("--sigma: must be a number in [0, 1], got ") + bad);
  for (const std::string& v : {"forward", "quantize-nvfp4", "quantize-checkpoint", "int8-convrot",
                               "prune-adaln", "info", "bench compare", "compare", "bench load"})
    expect_error(v, "required");
}

TEST(CliErrors, MissingFiles) {
  const std::string missing = tmp("missing.safetensors");
  for (const std::string& args :
       {"sample --checkpoint " + missing, "sample --inputs " + missing,
        "sample --text-embeddings " + missing, "sample --qkv-override " + missing,
        "forward --checkpoint " + missing + " --inputs " + kGolden + " --out " + tmp("f.st"),
        "forward --checkpoint " + kWeights + " --inputs " + missing + " --out " + tmp("f.st"),
        "info " + missing, "quantize-nvfp4 --in " + missing + " --out " + tmp("n.st"),
        "quantize-checkpoint --in " + missing + " --out " + tmp("q.st") + " --format fp8",
        "int8-convrot --in " + missing + " --out " + tmp("i.st"),
        "prune-adaln --in " + missing + " --out " + tmp("p.st"),
        "bench compare " + missing + " " + missing, "compare " + missing + " " + kWeights,
        "bench load " + missing})
    expect_error(args, missing);
}

TEST(CliErrors, FilesThatAreNotSafetensors) {
  const std::string bad = garbage_file();
  for (const std::string& args :
       {"sample --checkpoint " + bad + " --steps 1 --out " + tmp("s.st"),
        "sample --inputs " + bad + " --steps 1 --out " + tmp("s.st"),
        "sample --text-embeddings " + bad + " --steps 1 --out " + tmp("s.st"),
        "forward --checkpoint " + bad + " --inputs " + kGolden + " --out " + tmp("f.st"),
        "forward --checkpoint " + kWeights + " --inputs " + bad + " --out " + tmp("f.st"),
        "info " + bad, "quantize-nvfp4 --in " + bad + " --out " + tmp("n.st"),
        "quantize-checkpoint --in " + bad + " --out " + tmp("q.st") + " --format nvfp4",
        "int8-convrot --in " + bad + " --out " + tmp("i.st"),
        "prune-adaln --in " + bad + " --out " + tmp("p.st"), "bench compare " + bad + " " + bad,
        "compare " + bad + " " + bad, "bench load " + bad}) {
    SCOPED_TRACE(args);
    expect_error(args, bad);
    EXPECT_FALSE(std::ifstream(tmp("s.st")).good()) << "an output was written";
  }
}

// Safetensors files of the wrong kind: weights where inputs are expected and the reverse.
TEST(CliErrors, WrongKindOfFile) {
  expect_error("forward --checkpoint " + kGolden + " --inputs " + kGolden + " --out " + tmp("f.st"),
               kGolden);
  expect_error(
      "forward --checkpoint " + kWeights + " --inputs " + kWeights + " --out " + tmp("f.st"),
      kWeights);
  expect_error("sample --text-embeddings " + kWeights + " --out " + tmp("s.st"), kWeights);
  expect_error("quantize-nvfp4 --in " + kWeights + " --out " + tmp("n.st"), kWeights);
  expect_error("int8-convrot --in " + kGolden + " --out " + tmp("i.st"), kGolden);
  expect_error("prune-adaln --in " + kGolden + " --out " + tmp("p.st"), kGolden);
  expect_error("bench load " + kGolden, kGolden);
  expect_error("compare " + kWeights + " " + kGolden, "holds video_latents or audio_latents");
}

TEST(CliErrors, OutputFolderMissing) {
  const std::string out = tmp("no_such_folder") + "/x";
  for (const std::string& args :
       {"sample --out " + out, "sample --report " + out,
        "forward --checkpoint " + kWeights + " --inputs " + kGolden + " --out " + out,
        "quantize-checkpoint --in " + kWeights + " --out " + out + " --format fp8",
        "int8-convrot --in " + kWeights + " --out " + out,
        "prune-adaln --in " + kWeights + " --out " + out,
        "compare " + kWeights + " " + kWeights + " --json " + out})
    expect_error(args, "does not exist");
}

}  // namespace
}  // namespace h3rt
