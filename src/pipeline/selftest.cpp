// h3rt/selftest.h: the GPU self-test's cases and report.
#include "h3rt/selftest.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <tuple>

#include "h3rt/check.h"
#include "h3rt/pipeline.h"
#include "h3rt/quantize.h"
#include "pipeline/selftest_bounds.h"

#ifdef H3RT_HAVE_CUDA
#include "cuda/runtime.h"
#include "ops/attention_sage/attention_sage_cuda.h"
#include "ops/attention_sage/selftest.h"
#include "ops/int8_linear/selftest.h"
#endif

namespace h3rt {

bool SelftestReport::passed() const {
  int ran = 0;
  for (const auto& c : cases) {
    if (c.skipped) continue;
    if (!c.passed) return false;
    ++ran;
  }
  return ran > 0;
}

bool gpu_suite_ran_on(int cc) {
  return cc == 90;
}

std::string untested_arch_note(int cc) {
  if (cc == 0 || gpu_suite_ran_on(cc)) return "";
  return "h3rt's GPU test suite has run on sm_90 only; on this sm_" + std::to_string(cc) +
         " GPU run `h3rt selftest` once to check its kernels against the CPU reference";
}

nlohmann::json to_json(const SelftestReport& r) {
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& c : r.cases)
    cases.push_back({{"name", c.name},
                     {"result", c.skipped  ? "skipped"
                                : c.passed ? "passed"
                                           : "failed"},
                     {"detail", c.detail},
                     {"seconds", c.seconds}});
  return {{"device", r.device},
          {"compute_capability", std::to_string(r.cc / 10) + "." + std::to_string(r.cc % 10)},
          {"gpu_suite_ran_on_this_arch", r.suite_ran_here},
          {"seed", r.seed},
          {"passed", r.passed()},
          {"cases", cases}};
}

std::string format_selftest(const SelftestReport& r) {
  std::string s = "h3rt selftest on " + r.device + ", seed " + std::to_string(r.seed) + "\n";
  int failed = 0, ran = 0;
  for (const auto& c : r.cases) {
    char head[160];
    std::snprintf(head, sizeof head, "  %-7s %-36s %6.2f s  ",
                  c.skipped  ? "skip"
                  : c.passed ? "PASS"
                             : "FAIL",
                  c.name.c_str(), c.seconds);
    s += head + c.detail + "\n";
    ran += !c.skipped;
    failed += !c.skipped && !c.passed;
  }
  s += failed ? "FAILED: " + std::to_string(failed) + " of " + std::to_string(ran) + " cases\n"
              : "passed: " + std::to_string(ran) + " cases\n";
  if (!r.suite_ran_here)
    s += "note: h3rt's GPU test suite has run on sm_90 only; on this GPU this self-test is what "
         "checks its kernels\n";
  return s;
}

#ifndef H3RT_HAVE_CUDA

SelftestReport selftest(const SelftestOptions&) {
  H3RT_FAIL("selftest: this h3rt was built without CUDA (it checks the GPU kernels)");
}

#else

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kNoSage = "the Sage kernels run on sm_90 / sm_120 / sm_121";
using selftest_detail::VelocityError;

// A directory of its own under the system's temporary directory, removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(uint64_t seed) {
    path = std::filesystem::temp_directory_path() /
           ("h3rt-selftest-" + std::to_string(getpid()) + "-" + std::to_string(seed));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// What a case found: whether it is within its bounds, and its figures or what missed.
struct Outcome {
  bool passed = false;
  std::string detail;
};
Outcome pass(std::string figures) {
  return {true, std::move(figures)};
}
Outcome fail(std::string why) {
  return {false, std::move(why)};
}

// Runs `body` as case `name`: its time, and an exception as the failure's detail.
SelftestCase run_case(const SelftestOptions& o, const std::string& name,
                      const std::function<Outcome()>& body) {
  if (o.progress) o.progress(name);
  SelftestCase c;
  c.name = name;
  const auto t0 = Clock::now();
  try {
    const Outcome out = body();
    c.passed = out.passed;
    c.detail = out.detail;
  } catch (const std::exception& e) {
    c.detail = std::string("error: ") + e.what();
  }
  c.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return c;
}

SelftestCase skipped(const std::string& name, const std::string& why) {
  SelftestCase c;
  c.name = name;
  c.skipped = true;
  c.detail = why;
  return c;
}

Outcome sage_case(int64_t seq, int64_t heads, uint64_t seed) {
  const auto r = attention_sage::run_sage_selftest(seq, heads, seed);
  const std::string failure = attention_sage::sage_selftest_failure(r);
  char b[240];
  if (r.exact_checked)
    std::snprintf(b, sizeof b,
                  "%s: pre-pass bit-exact; rel L2 %.2e vs the CPU Sage reference; vs fp64 rel L2 "
                  "%.4f (CPU reference %.4f), cosine %.6f",
                  r.variant.c_str(), r.rel_l2_sage, r.rel_l2_exact, r.ref_rel_l2_exact,
                  r.cosine_exact);
  else
    std::snprintf(b, sizeof b,
                  "%s: pre-pass bit-exact; rel L2 %.2e vs the CPU Sage reference on %lld "
                  "sampled rows",
                  r.variant.c_str(), r.rel_l2_sage, static_cast<long long>(r.rows_checked));
  return failure.empty() ? pass(b) : fail(r.variant + ": " + failure);
}

Outcome int8_case(int64_t rows, int64_t in, int64_t out, uint64_t seed) {
  const auto r = ops::run_int8_selftest(rows, in, out, 256, seed);
  const std::string failure = ops::int8_selftest_failure(r);
  const std::string paths = r.quantizer + " quantizer, " + r.gemm + " GEMM";
  return failure.empty() ? pass(paths + ": q, scales and outputs of " +
                                std::to_string(r.rows_checked) + " sampled rows bit-exact")
                         : fail(paths + ": " + failure);
}

// One format's checkpoint, forwarded on the CPU (fp32 reference, bf16 baseline) once and on the
// GPU by each case.
struct FormatRun {
  std::string file;
  Fp8Activations fp8 = Fp8Activations::static_scale;
  ForwardOutputs ref, cpu_bf16;
};

ForwardOutputs forward_on(const FormatRun& f, const Request& req, DenoiserOptions o,
                          ForwardOutputs* replay = nullptr) {
  o.fp8_activations = f.fp8;
  ModelSource src;
  src.checkpoint = f.file;
  const auto d = Denoiser::create(src, o);
  ForwardOutputs out = forward_request(*d, req, 0.6f);
  if (replay) *replay = forward_request(*d, req, 0.6f);  // a warm step: a CUDA graph replay
  return out;
}

bool same_bits(const FloatVec& a, const FloatVec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

Outcome forward_case(const FormatRun& f, const Request& req, Attention attention) {
  DenoiserOptions o;
  o.device = Device::cuda;
  o.attention = attention;
  ForwardOutputs replay;
  const ForwardOutputs gpu = forward_on(f, req, o, &replay);
  std::string figures;
  for (int k = 0; k < 2; ++k) {
    const char* m = k ? "audio" : "video";
    const FloatVec& ref = k ? f.ref.audio_velocity : f.ref.video_velocity;
    const VelocityError g =
        selftest_detail::velocity_error(k ? gpu.audio_velocity : gpu.video_velocity, ref);
    const VelocityError c = selftest_detail::velocity_error(
        k ? f.cpu_bf16.audio_velocity : f.cpu_bf16.video_velocity, ref);
    const std::string failure = attention == Attention::sage
                                    ? selftest_detail::sage_forward_failure(g, m)
                                    : selftest_detail::bf16_rule_failure(g, c, m);
    if (!failure.empty()) return fail(failure);
    char b[160];
    if (attention == Attention::sage)
      std::snprintf(b, sizeof b, "%s rel L2 %.4f cos %.5f", m, g.rel_l2, g.cosine);
    else
      std::snprintf(b, sizeof b, "%s mean %.2e (CPU bf16 %.2e) max %.2e (%.2e)", m, g.mean_abs,
                    c.mean_abs, g.max_abs, c.max_abs);
    figures += (k ? "; " : "") + std::string(b);
  }
  if (!same_bits(gpu.video_velocity, replay.video_velocity) ||
      !same_bits(gpu.audio_velocity, replay.audio_velocity))
    return fail("the second forward (a CUDA graph replay) differs from the first");
  return pass(figures + "; replay bit-identical");
}

// The tiny model's checkpoint in `format` ("bf16": as written), and its CPU forwards.
FormatRun prepare_format(const TempDir& dir, const std::string& bf16_file,
                         const std::string& format, const Request& req) {
  FormatRun f;
  f.file = bf16_file;
  if (format != "bf16") {
    QuantizeCheckpointOptions q;
    q.format = format == "nvfp4"        ? WeightFormat::nvfp4
               : format == "fp8_scaled" ? WeightFormat::fp8_scaled
                                        : WeightFormat::int8;
    q.int8_group = 64;  // divides the tiny model's widths (192, 256, 384)
    f.file = dir.file(format + ".safetensors");
    quantize_checkpoint(bf16_file, f.file, q);
  }
  // quantize-checkpoint writes no input scales: the fp8 GEMMs run with per-call scales.
  if (format == "fp8_scaled") f.fp8 = Fp8Activations::dynamic;
  DenoiserOptions cpu;
  cpu.precision = Precision::fp32;
  f.ref = forward_on(f, req, cpu);
  cpu.precision = Precision::bf16;
  f.cpu_bf16 = forward_on(f, req, cpu);
  return f;
}

}  // namespace

SelftestReport selftest(const SelftestOptions& o) {
  const std::string no_gpu = cuda::cuda_device_unavailable_reason();
  H3RT_CHECK(no_gpu.empty(), "selftest: ", no_gpu);
  SelftestReport r;
  int dev = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  r.cc = cuda::current_device_cc();
  r.device = cuda::device_name(dev) + " (sm_" + std::to_string(r.cc) + ")";
  const std::string arch = cuda::arch_support_error(r.cc, cuda::device_name(dev));
  H3RT_CHECK(arch.empty(), "selftest: ", arch);
  r.suite_ran_here = gpu_suite_ran_on(r.cc);
  r.seed = o.seed ? o.seed : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  const bool sage = attention_sage::sage_runs_on(r.cc);
  // 15,499 rows: ComfyUI's default 864x480, 124 frames (every tile and ring index in use).
  for (auto [seq, heads] : {std::pair<int64_t, int64_t>{77, 3}, {800, 1}, {15499, 2}}) {
    const std::string name =
        "sage attention S=" + std::to_string(seq) + " H=" + std::to_string(heads);
    r.cases.push_back(sage ? run_case(o, name, [&] { return sage_case(seq, heads, r.seed + seq); })
                           : skipped(name, kNoSage));
  }

  // The users' default block format at release widths: qkv of 864x480 and fc2's input width.
  for (auto [rows, in, out] :
       {std::tuple<int64_t, int64_t, int64_t>{15499, 5376, 21504}, {2000, 14336, 5376}}) {
    const std::string name =
        "int8 GEMM " + std::to_string(rows) + "x" + std::to_string(in) + "->" + std::to_string(out);
    r.cases.push_back(run_case(o, name, [&] { return int8_case(rows, in, out, r.seed + in); }));
  }

  const TempDir dir(r.seed);
  const H3Config config = H3Config::tiny();
  const std::string bf16_file = dir.file("bf16.safetensors");
  write_safetensors(bf16_file, synthetic_checkpoint(config, r.seed));
  // 512 x 384, 22 frames: 1,344 video + 74 audio + 10 text rows (ragged M; the Sage ring wraps)
  RequestOptions ro;
  ro.width = 512, ro.height = 384, ro.seed = r.seed;
  const Request req = make_request(config, ro);
  for (const char* format : {"bf16", "fp8_scaled", "int8_convrot", "nvfp4"}) {
    FormatRun f;
    const std::string name = std::string("forward ") + format;
    r.cases.push_back(run_case(o, name, [&] {
      f = prepare_format(dir, bf16_file, format, req);
      return forward_case(f, req, Attention::bf16);
    }));
    if (std::strcmp(format, "int8_convrot") != 0) continue;
    if (!sage) {
      r.cases.push_back(skipped(name + " + sage", kNoSage));
    } else if (f.file.empty() || f.ref.video_velocity.empty()) {
      r.cases.push_back(skipped(name + " + sage", "the checkpoint's CPU forward did not run"));
    } else {
      r.cases.push_back(
          run_case(o, name + " + sage", [&] { return forward_case(f, req, Attention::sage); }));
    }
  }
  return r;
}

#endif

}  // namespace h3rt
