// The GPU self-test (`h3rt selftest`, Python `h3rt.selftest()`): the kernels this build runs on
// this GPU, checked against the CPU reference on fresh random data (about 15 s on an H100 host).
//
// Why: the project's GPU test suite has run on Hopper (sm_90) only. The Blackwell code paths
// (sm_100 / sm_120 / sm_121: the mma.sync Sage kernel, the sm_120 int8 GEMM, the native NVFP4
// GEMM) are compiled and dispatched by compute capability but have never run here. On such a
// GPU the self-test is the first check that they compute what the CPU reference computes; the
// ComfyUI node runs it once before its first h3rt forward there and falls back to ComfyUI's
// forward when it fails.
//
// Cases (each fresh data from one seed, printed so a run can be repeated):
//   sage attention   the Sage op as the model dispatches it (pre-pass + the kernel this device
//                    picks) on bf16 N(0,1) Q/K/V, S = 77 (3 heads) and S = 800 (1 head, 7 key
//                    blocks): every pre-pass output bit-identical to the CPU reference, the
//                    output within rel L2 4e-3 of the CPU Sage reference (the kernels' row-sum
//                    form) and its rel L2 against fp64 attention within 1.1x + 2e-3 of that
//                    reference's own (and <= 0.05), cosine >= 0.999 (the GPU suite's bounds).
//   sage attention S = 15499 (2 heads: ComfyUI's default 864x480, 124 frames) the whole pre-pass
//                    bit-exact, the output on 32 sampled rows within rel L2 4e-3 of the CPU Sage
//                    reference.
//   int8 GEMM        the users' default block format at release widths: random bf16 rows
//                    rotated and quantized (G = 256) and the int8 GEMM with its epilogue, at
//                    15499 x 5376 -> 21504 (qkv at 864x480) and 2000 x 14336 -> 5376 (fc2's
//                    width); 16 sampled rows' quantized values, scales and outputs bit-exact
//                    with the host reference (include/h3rt/int8.h).
//   forward <format> the tiny model (synthetic weights written as a checkpoint, its block
//                    projections quantized as `h3rt quantize-checkpoint` does: bf16, fp8_scaled
//                    with per-call activation scales, int8_convrot G = 64, nvfp4), one forward
//                    through the public Denoiser with bf16 attention, against the CPU fp32
//                    forward of the same file: per modality mean |error| <= 2x and max <= 3x
//                    the CPU bf16 forward's (the GPU suite's rule); the second forward (a CUDA
//                    graph replay) bit-identical to the first.
//   forward int8_convrot + sage  the same with Sage attention (what users run): rel L2 <=
//                    0.05 and cosine >= 0.999 per modality against the CPU fp32 forward (exact
//                    attention; an H100 measured 0.0045-0.0051), and the replay bit-identical.
//                    Skipped where the Sage kernels do not run (not sm_90 / 120 / 121).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace h3rt {

struct SelftestOptions {
  uint64_t seed = 0;  // 0: a fresh seed (the report gives the one used)
  // Called with the case's name as each case starts.
  std::function<void(const std::string& name)> progress;
};

struct SelftestCase {
  std::string name;
  bool skipped = false;  // not applicable on this device (`detail` says why)
  bool passed = false;
  std::string detail;  // the figures against their bounds, or the error that stopped the case
  double seconds = 0;
};

struct SelftestReport {
  std::string device;           // the GPU's name and compute capability
  int cc = 0;                   // compute capability, major * 10 + minor
  bool suite_ran_here = false;  // this project's GPU suite has run on this arch (sm_90)
  uint64_t seed = 0;
  std::vector<SelftestCase> cases;
  bool passed() const;  // every case not skipped passed, and at least one ran
};

// Runs every case on the current CUDA device. Throws (h3rt::Error) when the build has no CUDA
// backend or no CUDA device is available; a case that fails, or throws, is reported as failed.
SelftestReport selftest(const SelftestOptions& options = {});

// Whether this project's own GPU test suite has run on devices of compute capability cc
// (major * 10 + minor): only sm_90 (H100 / H200).
bool gpu_suite_ran_on(int cc);

// For front ends about to run on a GPU of compute capability cc: "" where the GPU suite ran
// (sm_90) or cc is 0, else one line asking to run `h3rt selftest` there first.
std::string untested_arch_note(int cc);

nlohmann::json to_json(const SelftestReport& r);
std::string format_selftest(const SelftestReport& r);  // a table, one line per case

}  // namespace h3rt
