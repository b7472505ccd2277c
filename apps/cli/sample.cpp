// `h3rt sample`: the whole denoising loop (h3rt::sample) on the CPU reference or the CUDA
// backend, with a progress line, final latents and a JSON report; resume files on request and
// on Ctrl-C (SIGINT stops at the next step boundary).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <tuple>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/output_path.h"
#include "cli/progress.h"
#include "cli/validators.h"
#include "h3rt/quality.h"
#include "h3rt/report.h"
#include "h3rt/safetensors.h"

namespace h3rt::cli {
namespace {

struct SampleOptions {
  ModelOptions model;
  std::string inputs, text_embeddings, conditioning;
  RequestOptions request;
  int steps = 8;
  std::string sampler = "euler", scheduler = "diffusers", sampler_state = "device";
  double shift = kVideoShift, audio_shift = kAudioShift;
  int checkpoint_every = 0;
  std::string checkpoint_file, resume;
  std::string out = "latents.safetensors", report;
  HybridSettings hybrid;  // off by default
  bool gate = false;
};

std::atomic<bool> g_interrupted{false};

// SIGINT: ask the loop to stop after this step; a second Ctrl-C ends the process (SA_RESETHAND).
extern "C" void on_sigint(int) {
  g_interrupted.store(true);
  const char msg[] = "\nh3rt sample: interrupted; saving after this step (Ctrl-C again quits)\n";
  [[maybe_unused]] ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
}

void install_sigint_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}

// The library's options from the CLI's: sampler, schedule, resume file (default: --resume's
// file, else the output path + ".resume").
h3rt::SampleOptions library_options(const SampleOptions& o, const ModelOptions& m) {
  h3rt::SampleOptions so;
  so.steps = o.steps;
  so.sampler = parse_sampler(o.sampler, "--sampler");
  so.scheduler = parse_scheduler(o.scheduler, "--scheduler");
  so.video_shift = o.shift;
  so.audio_shift = o.audio_shift;
  so.noise_seed = o.request.seed;
  so.checkpoint_every = o.checkpoint_every;
  so.resume_path = o.resume;
  so.checkpoint_path = !o.checkpoint_file.empty()
                           ? o.checkpoint_file
                           : (o.resume.empty() ? o.out + ".resume" : o.resume);
  so.model_identity = model_identity(m.source(), m.denoiser_options());
  so.cancel = &g_interrupted;
  const HybridPolicy hybrid = hybrid_policy(o.hybrid, kHybridFlagNames);
  so.hybrid = hybrid.hybrid;
  so.step_cache = hybrid.step_cache;
  so.device_loop = o.sampler_state == "device";
  return so;
}

// --gate's needs (the hybrid's ranges are checked where its policy is built: library_options).
void check_gate_cli(const SampleOptions& o) {
  if (!o.gate) return;
  H3RT_CHECK(o.hybrid.sparse_attention > 0 || o.hybrid.step_cache > 0,
             "--gate compares the dense run with an approximate one: give --sparse-attention "
             "TAU or --step-cache THRESH");
  H3RT_CHECK(o.resume.empty() && o.checkpoint_every == 0,
             "--gate runs both trajectories from the noise: no --resume or --checkpoint-every");
}

// What --gate writes next to --out: <stem>.dense.safetensors, <stem>.approx.safetensors and
// <stem>.gate.json (stem: --out without .safetensors).
struct GateFiles {
  std::string dense, approx, comparison;
};
GateFiles gate_files(const std::string& out) {
  const std::string ext = ".safetensors";
  const bool has_ext =
      out.size() > ext.size() && out.compare(out.size() - ext.size(), ext.size(), ext) == 0;
  const std::string stem = has_ext ? out.substr(0, out.size() - ext.size()) : out;
  return {stem + ".dense" + ext, stem + ".approx" + ext, stem + ".gate.json"};
}

int evaluations(const h3rt::SampleOptions& so, const SequenceLayout& L) {
  if (so.scheduler == Scheduler::simple) return so.steps;
  return static_cast<int>(make_sampler_plan(L, so.steps + 1, static_cast<float>(so.video_shift),
                                            static_cast<float>(so.audio_shift))
                              .steps.size());
}

Request make_cli_request(const SampleOptions& o, const H3Config& c) {
  if (!o.inputs.empty()) return request_from_inputs(o.inputs, c);
  RequestOptions r = o.request;
  r.release_defaults = o.model.preset == "h3";
  int64_t length = 0;
  if (!o.text_embeddings.empty()) r.text = text_embeddings_from_file(o.text_embeddings, c, &length);
  Request req = make_request(c, r);
  if (!o.conditioning.empty()) condition_request_from_file(req, c, o.conditioning, r.seed);
  return req;
}

nlohmann::json report_of(const SampleOptions& o, const h3rt::SampleOptions& so, const Denoiser& d,
                         const SequenceLayout& L, const SampleResult& res, double total_seconds) {
  SampleReport rep;
  rep.stages = res.stages;
  rep.device = d.device_name();
  rep.model = o.model.describe();
  if (o.model.fp8_activations == "dynamic") rep.model += ", fp8 activations dynamic";
  rep.precision = o.model.precision_name();
  rep.set_layout(L);
  rep.frames = video_frames_for(L.frames);
  rep.width = L.width * 16;
  rep.height = L.height * 16;
  rep.seed = o.request.seed;
  rep.steps = static_cast<int>(res.stages.size()) + res.resumed_steps;
  rep.peak_host_bytes = host_memory_stats().peak_bytes;
  std::tie(rep.peak_device_allocated_bytes, rep.peak_device_reserved_bytes) = d.device_peak_bytes();
  rep.video = checksum(res.video_latents.data(), static_cast<int64_t>(res.video_latents.size()));
  rep.audio = checksum(res.audio_latents.data(), static_cast<int64_t>(res.audio_latents.size()));
  rep.total_seconds = total_seconds;
  nlohmann::json j = to_json(rep);
  j["weight_streaming"] = to_json(d.weight_streaming());
  j["sampling"] = {{"sampler", sampler_name(so.sampler)},
                   {"scheduler", scheduler_name(so.scheduler)},
                   {"shift_video", so.video_shift},
                   {"shift_audio", so.audio_shift},
                   {"sigmas", res.video_sigmas},
                   {"resumed_steps", res.resumed_steps},
                   {"resumed_from", o.resume}};
  j["sampling"]["sampler_state"] = res.device_loop ? "device" : "host";
  j["hybrid"] = hybrid_report(so, res);
  j["gemm"] = o.model.gemm;
  return j;
}

void write_latents(const std::string& path, const SampleResult& res, uint64_t seed) {
  write_safetensors(
      path,
      {{"video_latents",
        tensor_from_f32({res.video_latents.begin(), res.video_latents.end()}, res.video_shape)},
       {"audio_latents",
        tensor_from_f32({res.audio_latents.begin(), res.audio_latents.end()}, res.audio_shape)}},
      {{"producer", "h3rt sample"}, {"seed", std::to_string(seed)}});
}

void print_hybrid(const h3rt::SampleOptions& so, const SampleResult& res) {
  if (!so.hybrid.sparse.enabled() && !so.step_cache.enabled()) return;
  const nlohmann::json h = hybrid_report(so, res);
  std::fprintf(stderr, "h3rt sample: %d of %zu steps sparse, %d reused the step cache\n",
               h["sparse_steps"].get<int>(), res.hybrid_steps.size(), h["reused_steps"].get<int>());
  if (!so.hybrid.check.enabled()) return;
  const nlohmann::json& k = h["sparse_attention"]["check"];
  std::fprintf(stderr,
               "h3rt sample: sparse check on %d steps; %lld (block, head) pairs dense at the end "
               "(bound %g; per check step: the report's hybrid.steps[i].sparse_check)\n",
               k["check_steps"].get<int>(), static_cast<long long>(k["dense_heads"].get<int64_t>()),
               so.hybrid.check.bound);
}

// --gate: the dense and the approximate run, both written, and their comparison.
void run_gate(const SampleOptions& o, const h3rt::SampleOptions& so, Denoiser& d,
              const Request& req, std::chrono::steady_clock::time_point t_start) {
  const GateFiles f = gate_files(o.out);
  for (const std::string* p : {&f.dense, &f.approx, &f.comparison})
    check_output_path(*p, "--out (with --gate)");
  GateResult g = sample_gate(d, req, so);
  signal(SIGINT, SIG_DFL);
  write_latents(f.dense, g.dense, o.request.seed);
  write_latents(f.approx, g.approx, o.request.seed);
  g.comparison.file_a = f.dense;
  g.comparison.file_b = f.approx;
  std::fputs(format_latent_comparison(g.comparison).c_str(), stdout);
  write_json(f.comparison, to_json(g.comparison));
  print_hybrid(so, g.approx);
  std::fprintf(stderr, "h3rt sample: gate: dense %.2f s, approximate %.2f s; wrote %s, %s, %s\n",
               g.dense_seconds, g.approx_seconds, f.dense.c_str(), f.approx.c_str(),
               f.comparison.c_str());
  if (o.report.empty()) return;
  const double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  nlohmann::json rep = report_of(o, so, d, req.layout, g.approx, total);
  rep["gate"] =
      gate_report(g, {{"dense", f.dense}, {"approx", f.approx}, {"comparison", f.comparison}});
  write_json(o.report, rep);
}

void run_sample(const SampleOptions& o) {
  const RequestOptions& r = o.request;
  H3RT_CHECK(
      o.inputs.empty() || (r.frames == 0 && r.width == 0 && r.height == 0 && r.audio_seconds == 0 &&
                           o.text_embeddings.empty() && o.conditioning.empty()),
      "--inputs gives the shapes, noise, text and conditioning; do not combine it with "
      "--frames, --width, --height, --audio-seconds, --text-embeddings or --conditioning");
  H3RT_CHECK(o.steps >= 1 && o.steps <= 1000, "--steps must be in [1, 1000], got ", o.steps);
  H3RT_CHECK(o.checkpoint_every >= 0, "--checkpoint-every must be >= 0, got ", o.checkpoint_every);
  check_gate_cli(o);
  check_output_path(o.out, "--out");
  if (!o.report.empty()) check_output_path(o.report, "--report");
  h3rt::SampleOptions so = library_options(o, o.model);
  check_output_path(so.checkpoint_path, "--checkpoint-file");
  reset_host_peak();
  const auto t_start = std::chrono::steady_clock::now();
  std::unique_ptr<Denoiser> denoiser = o.model.create();
  const H3Config& c = denoiser->config();
  Request req = make_cli_request(o, c);
  const SequenceLayout L = req.layout;
  const int evals = evaluations(so, L);
  std::fprintf(stderr,
               "h3rt sample: %s, %s, %lld rows (text %lld, condition %lld, audio %lld, video "
               "%lld), %d steps (%s, %s), seed %llu, %s\n",
               o.model.describe().c_str(), o.model.precision_name().c_str(), (long long)L.seq_len(),
               (long long)L.text_len, (long long)L.cond_rows(), (long long)L.audio_rows(),
               (long long)L.video_rows(), evals, o.sampler.c_str(), o.scheduler.c_str(),
               (unsigned long long)r.seed, denoiser->device_name().c_str());

  Progress progress("denoising", evals);
  so.progress = [&](int step, int, double) {
    progress.update(step);
    return true;
  };
  install_sigint_handler();
  if (o.gate) {
    progress = Progress("denoising (dense, then approximate)", 2 * evals);
    int base = 0;  // steps of the dense run, once it is done
    so.progress = [&](int step, int n, double) {
      if (base == 0 || step > 0) progress.update(base + step);  // step 0 of run 2: shown
      if (step == n) base = n;
      return true;
    };
    run_gate(o, so, *denoiser, req, t_start);
    return;
  }
  const SampleResult res = sample(*denoiser, std::move(req), so);
  print_hybrid(so, res);
  signal(SIGINT, SIG_DFL);
  write_latents(o.out, res, r.seed);
  // The run is complete: its resume file (checkpoints, or the one it resumed from) is stale.
  if (so.checkpoint_every > 0 || !so.resume_path.empty()) std::remove(so.checkpoint_path.c_str());
  const double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  const nlohmann::json rep = report_of(o, so, *denoiser, L, res, total);
  std::fprintf(stderr,
               "h3rt sample: wrote %s in %.2f s; checksums video %.6g (|x| %.6g), "
               "audio %.6g (|x| %.6g)\n",
               o.out.c_str(), total, rep["checksums"]["video_latents"]["sum"].get<double>(),
               rep["checksums"]["video_latents"]["abs_sum"].get<double>(),
               rep["checksums"]["audio_latents"]["sum"].get<double>(),
               rep["checksums"]["audio_latents"]["abs_sum"].get<double>());
  if (!o.report.empty()) write_json(o.report, rep);
}

}  // namespace

void add_sample_command(CLI::App& app) {
  auto o = std::make_shared<SampleOptions>();
  auto* cmd = app.add_subcommand(
      "sample",
      "Run the whole denoising loop and write the final latents (with no arguments: "
      "the tiny preset, a few seconds on the CPU)");
  o->model.add_to(cmd, true);
  cmd->add_option("--inputs", o->inputs,
                  "Inputs file (input/text_embeds, input/video_latents as the starting noise, "
                  "input/audio_latents, optional conditioning as --conditioning); it fixes "
                  "shapes, noise and text")
      ->check(CLI::ExistingFile);
  cmd->add_option("--conditioning", o->conditioning,
                  "Conditioning file for the request made from the sizes and --seed: keyframes "
                  "(keyframe/<i>/video [1,24,vt,H,W] on the target latent grid, keyframe/<i>/audio "
                  "[2,32,rt], metadata keyframe/<i>/frame_index), references (ref/<i>/video, "
                  "ref/<i>/audio, metadata ref/<i>/kind image|video|audio), input/text_token_tags "
                  "[L]; README \"Inputs files\". Condition rows are never updated; their noise "
                  "augmentation is drawn from cond_seed (default --seed) unless the file has "
                  "<cond>/video_noise, <cond>/audio_noise")
      ->check(CLI::ExistingFile);
  cmd->add_option("--text-embeddings", o->text_embeddings,
                  "Text encoder output [1, L, text_dim] (tensor text_embeds); default: seeded "
                  "stand-in embeddings")
      ->check(CLI::ExistingFile);
  cmd->add_option("--text-tokens", o->request.text_tokens,
                  "Length of the stand-in text embeddings (default 10 tiny, 100 h3)")
      ->check(positive_number());
  cmd->add_option("--frames", o->request.frames,
                  "Video frames: 1, 5, 9, 13, 17, 18, 22, ... (default 22 tiny, 124 h3)")
      ->check(positive_number());
  cmd->add_option("--width", o->request.width,
                  "Width in pixels, a multiple of 32 (default 192 tiny, 1344 h3)")
      ->check(positive_number());
  cmd->add_option("--height", o->request.height,
                  "Height in pixels, a multiple of 32 (default 128 tiny, 768 h3)")
      ->check(positive_number());
  cmd->add_option("--audio-seconds", o->request.audio_seconds,
                  "Audio length in seconds, 40 latents/s (default: the video's length at 24 fps)")
      ->check(positive_number());
  cmd->add_option("--steps", o->steps, "Model evaluations (default 8)");
  cmd->add_option("--sampler", o->sampler,
                  "euler (with --scheduler diffusers the reference's Euler, with simple "
                  "ComfyUI's sample_euler), res_multistep or euler_ancestral (ComfyUI's; "
                  "--scheduler simple only; euler_ancestral's noise is h3rt's, seeded by --seed)")
      ->check(CLI::IsMember({"euler", "res_multistep", "euler_ancestral"}))
      ->capture_default_str();
  cmd->add_option("--scheduler", o->scheduler,
                  "diffusers: the reference scheduler (Euler, each stream on its own shifted "
                  "grid; the default, its bits unchanged). simple: ComfyUI's simple schedule and "
                  "sampling loop (the audio carried on the video schedule)")
      ->check(CLI::IsMember({"diffusers", "simple"}))
      ->capture_default_str();
  cmd->add_option("--shift", o->shift, "Video sigma shift")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--audio-shift", o->audio_shift, "Audio sigma shift")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--checkpoint-every", o->checkpoint_every,
                  "Write a resume file every N steps (0: only on Ctrl-C, which stops the run at "
                  "the next step boundary and saves)")
      ->capture_default_str();
  cmd->add_option("--checkpoint-file", o->checkpoint_file,
                  "Resume file to write (default: the --resume file, else the --out path + "
                  "\".resume\"); removed when a run that checkpointed or resumed completes");
  cmd->add_option("--resume", o->resume,
                  "Continue from a resume file; it must come from the same model, request and "
                  "sampler options (differences are named). The result equals an uninterrupted "
                  "run's bit for bit")
      ->check(CLI::ExistingFile);
  cmd->add_option("--sampler-state", o->sampler_state,
                  "With --device cuda: where the latents live between steps. device: the "
                  "sampler updates run on the GPU and nothing crosses to the host until the end "
                  "(runs with denoise masks keep theirs on the host); host: the velocities come "
                  "back each step. Same bits either way")
      ->check(CLI::IsMember({"device", "host"}))
      ->capture_default_str();
  cmd->add_option("--cuda-graph", o->model.cuda_graph,
                  "With --device cuda: replay the steps from CUDA graphs (same bits as eager "
                  "launches; the first step of each kind runs eagerly)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--gemm", o->model.gemm,
                  "With --device cuda and a preset: the block GEMMs, quantized from the synthetic "
                  "weights on the GPU as `h3rt bench step --gemm` does: bf16; fp8 (e4m3, static "
                  "per-tensor scales); int8 (W8A8 as ComfyUI's int8_convrot); nvfp4 (W4A4). A "
                  "--checkpoint runs the formats it stores (an error with --gemm)")
      ->check(CLI::IsMember({"bf16", "fp8", "int8", "nvfp4"}))
      ->capture_default_str();
  cmd->add_option("--int8-group", o->model.int8_group,
                  "--gemm int8: the convrot group size (0: no rotation; default: 256 where it "
                  "divides every block projection's inputs, as for h3; 64 for tiny)")
      ->check(CLI::IsMember({0, 16, 64, 256}));
  cmd->add_option("--attention", o->model.attention,
                  "Attention in the blocks: bf16 (the reference numerics) or sage (8-bit "
                  "SageAttention2 numerics, --device cuda only; not bit-comparable)")
      ->check(CLI::IsMember({"bf16", "sage"}))
      ->capture_default_str();
  cmd->add_option("--sparse-attention", o->hybrid.sparse_attention,
                  "Block-sparse attention with router threshold TAU in [0, 10] (a z-score of each "
                  "key block's pooled score; 1.0 keeps about 16% of the blocks on Gaussian "
                  "scores); 0: off (dense). Steps from --dense-steps on, blocks from "
                  "--dense-blocks on, video query rows only (a forward without sparse support "
                  "runs dense; the report then has no sparse_fraction). An approximation: check "
                  "it with --gate")
      ->capture_default_str();
  cmd->add_option("--dense-steps", o->hybrid.dense_steps,
                  "With --sparse-attention: the first N steps stay dense, in [0, 1000]")
      ->capture_default_str();
  cmd->add_option("--dense-blocks", o->hybrid.dense_blocks,
                  "With --sparse-attention: the first N transformer blocks stay dense, in [0, "
                  "1000]")
      ->capture_default_str();
  cmd->add_option("--sparse-check", o->hybrid.sparse_check,
                  "With --sparse-attention: on the first sparse step and every K-th after it, "
                  "recompute 4 seeded query tiles of each sparse block densely and compare with "
                  "the sparse output; per (block, head) whose relative L1 reaches "
                  "--sparse-check-bound, that head runs dense in that block from the next step "
                  "on (the report's hybrid steps say what was measured). K in [0, 1000]; 0: off")
      ->capture_default_str();
  cmd->add_option("--sparse-check-bound", o->hybrid.sparse_check_bound,
                  "With --sparse-check: the relative L1 in [0, 100] at which a head turns dense "
                  "(0: every checked head)")
      ->capture_default_str();
  cmd->add_option("--step-cache", o->hybrid.step_cache,
                  "First-block step caching, threshold in [0, 100] (e.g. 0.08; 0: off): when "
                  "block 0's residual differs from the last fully computed step's by a relative "
                  "L1 below it, the step skips blocks 1..end and reuses that step's residual. "
                  "An approximation: check it with --gate")
      ->capture_default_str();
  cmd->add_option("--step-cache-max", o->hybrid.step_cache_max,
                  "With --step-cache: at most N reused steps in a row, in [1, 1000]")
      ->capture_default_str();
  cmd->add_flag("--gate", o->gate,
                "Run the dense trajectory and the approximate one (--sparse-attention / "
                "--step-cache) for the same seed and request; write <out>.dense.safetensors, "
                "<out>.approx.safetensors and the comparison <out>.gate.json (<out>: --out "
                "without .safetensors; --out itself is not written), print the comparison "
                "(as `h3rt compare`) and put it and both runs' times in --report");
  cmd->add_option("--seed", o->request.seed, "Noise seed (Philox4x32-10, same bits on CPU and GPU)")
      ->check(seed_number())
      ->capture_default_str();
  cmd->add_option("--out", o->out,
                  "Output: video_latents [1,24,T,H,W] and audio_latents [2,32,N], f32")
      ->capture_default_str();
  cmd->add_option("--report", o->report,
                  "Write a JSON report (stage times, peak memory, checksums); - for stdout");
  cmd->callback([o] { run_sample(*o); });
}

}  // namespace h3rt::cli
