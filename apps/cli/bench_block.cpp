// `h3rt bench block`: see src/bench/block_bench.h.
#include <cstdio>
#include <memory>

#include "bench/plot.h"
#include "cli/commands.h"
#include "cli/output_path.h"
#include "cli/validators.h"
#include "h3rt/check.h"
#include "h3rt/compare.h"
#include "h3rt/pipeline.h"
#include "h3rt/report.h"
#ifdef H3RT_HAVE_CUDA
#include "bench/block_bench.h"
#endif

namespace h3rt::cli {

void add_bench_block_command(CLI::App& bench) {
  struct Opts {
    std::string preset = "h3", out = "-", plot, peer;
    int reps = 10;
    double sustain = 0;
    std::string gemm = "bf16", attention = "bf16";
    int64_t width = 0, height = 0, frames = 0;
    int group = 256;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = bench.add_subcommand("block",
                                   "Time one DiT block on the GPU (bf16, synthetic "
                                   "weights) at the seed shape: 1344x768, 124 frames, "
                                   "37,810 rows; JSON report, with SM clock, power and joules "
                                   "per block and component from NVML where available");
  cmd->add_option("--preset", o->preset, "h3 (release dims) or tiny")
      ->check(CLI::IsMember({"h3", "tiny"}))
      ->capture_default_str();
  cmd->add_option("--gemm", o->gemm,
                  "Projection GEMMs: bf16; fp8 (e4m3, static per-tensor "
                  "scales, as ComfyUI fp8_scaled with input_scale); fp8-dynamic (e4m3, the "
                  "activation scale amax/448 computed on the device per call: amax + quantize "
                  "launches per projection); nvfp4 (W4A4 with "
                  "static input scales: producers encode the GEMM inputs); "
                  "nvfp4-dynamic (W4A4, input scales computed per call); or int8 (W8A8 as "
                  "ComfyUI's int8_convrot: weights rotated and quantized on the device, each "
                  "activation rotated and quantized per row per call)")
      ->check(CLI::IsMember({"bf16", "fp8", "fp8-dynamic", "nvfp4", "nvfp4-dynamic", "int8"}))
      ->capture_default_str();
  cmd->add_option("--attention", o->attention,
                  "Attention: bf16 (flash) or sage (8-bit SageAttention2 numerics, pre-pass "
                  "included)")
      ->check(CLI::IsMember({"bf16", "sage"}))
      ->capture_default_str();
  cmd->add_option("--group-size", o->group,
                  "--gemm int8: the convrot group size (0: plain int8, no rotation)")
      ->check(CLI::IsMember({0, 16, 64, 256}))
      ->capture_default_str();
  cmd->add_option("--width", o->width, "video width in pixels (default: the seed's 1344)")
      ->check(positive_number());
  cmd->add_option("--height", o->height, "video height in pixels (default: the seed's 768)")
      ->check(positive_number());
  cmd->add_option("--frames", o->frames,
                  "video frames (default: the seed's 124; 864x480x124 is ComfyUI's default)")
      ->check(positive_number());
  cmd->add_option("--reps", o->reps, "Timed repetitions (medians)")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--sustain", o->sustain,
                  "Also replay the block's CUDA graph back to back for about this many seconds "
                  "(an input refill before each) and report the wall time and joules per block "
                  "over the whole run (\"sustained\" in the telemetry): the blocks as a sampling "
                  "run chains them, at the GPU's power limit where it has one (0: not run)")
      ->check(non_negative_number())
      ->capture_default_str();
  cmd->add_option("--out", o->out, "JSON report path, - for stdout")->capture_default_str();
  cmd->add_option("--plot", o->plot,
                  "Also draw the block breakdown as SVG: one bar per component (the seeds' "
                  "names beside ours), the block total, clock and power per component when NVML "
                  "is available, and the peer's bars with --peer");
  cmd->add_option("--peer", o->peer,
                  "A peer block's JSON (bench/torch_block.py --json) to put in the report as "
                  "\"peer\" and beside ours in --plot (its result for this --gemm, else its "
                  "first)")
      ->check(CLI::ExistingFile);
  cmd->callback([o] {
#ifdef H3RT_HAVE_CUDA
    check_output_path(o->out, "--out");
    if (!o->plot.empty()) check_output_path(o->plot, "--plot");
    // The peer's names (bench/torch_block.py --gemm): bf16, fp8, int8_convrot.
    const std::string peer_gemm = o->gemm == "int8"              ? "int8_convrot"
                                  : o->gemm.rfind("fp8", 0) == 0 ? "fp8"
                                                                 : o->gemm;
    const nlohmann::json peer =
        o->peer.empty() ? nlohmann::json()
                        : bench::peer_for_block_report(read_json(o->peer), o->peer, peer_gemm);
    bench::BlockBenchOptions b;
    b.h3_dims = o->preset == "h3";
    if (!b.h3_dims) b = {false, 10, 9, 7, 8, 12};
    b.reps = o->reps;
    b.sustain_seconds = o->sustain;
    b.fp8 = o->gemm.rfind("fp8", 0) == 0;
    b.fp8_dynamic = o->gemm == "fp8-dynamic";
    b.nvfp4 = o->gemm.rfind("nvfp4", 0) == 0;
    b.nvfp4_static_input_scale = o->gemm == "nvfp4";
    b.sage_attention = o->attention == "sage";
    if (o->gemm == "int8") b.int8_group = o->group;
    const LatentShape sh = latent_shape_for(o->width, o->height, o->frames,
                                            {b.frames, b.height, b.width, b.audio_len});
    b.frames = sh.frames, b.height = sh.height, b.width = sh.width, b.audio_len = sh.audio;
    nlohmann::json report = bench::run_block_bench(b);
    if (!peer.is_null()) report["peer"] = peer;
    write_json(o->out, report);
    if (!o->plot.empty()) bench::write_svg(o->plot, bench::plot_report_svg(report));
#else
    H3RT_FAIL("this h3rt was built without CUDA (cmake -DH3RT_CUDA=ON needs nvcc)");
#endif
  });
}

}  // namespace h3rt::cli
