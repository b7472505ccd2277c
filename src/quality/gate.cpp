// The quality gate of an approximate sampling run against the dense one (h3rt sample --gate).
#include <chrono>

#include "h3rt/check.h"
#include "h3rt/quality.h"

namespace h3rt {
namespace {

double timed_sample(Denoiser& d, const Request& r, const SampleOptions& o, SampleResult& out) {
  const auto t0 = std::chrono::steady_clock::now();
  out = sample(d, r, o);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

GateResult sample_gate(Denoiser& denoiser, const Request& request, const SampleOptions& approx) {
  H3RT_CHECK(approx.hybrid.sparse.enabled() || approx.step_cache.enabled(),
             "the gate compares an approximate run with the dense one: turn on sparse attention "
             "(tau > 0) or step caching (threshold > 0)");
  H3RT_CHECK(approx.resume_path.empty() && approx.checkpoint_every == 0,
             "the gate runs both trajectories from the noise: no resume file or checkpoints");
  SampleOptions dense = approx;
  dense.hybrid.sparse.tau = 0;
  dense.step_cache.threshold = 0;
  GateResult g;
  g.dense_seconds = timed_sample(denoiser, request, dense, g.dense);
  g.approx_seconds = timed_sample(denoiser, request, approx, g.approx);
  g.comparison.video = compare_video(g.dense.video_latents.data(), g.approx.video_latents.data(),
                                     g.dense.video_shape);
  g.comparison.audio = compare_audio(g.dense.audio_latents.data(), g.approx.audio_latents.data(),
                                     g.dense.audio_shape);
  return g;
}

}  // namespace h3rt
