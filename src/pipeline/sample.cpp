// The sampling loop (rectified-flow Euler, video shift 12, audio shift 3) and the single
// forward at a sigma, over any Denoiser.
#include <chrono>
#include <cmath>

#include "h3rt/pipeline.h"

namespace h3rt {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Asks the callback and the flag whether to go on; throws Cancelled when told to stop.
void check_go_on(const SampleOptions& o, int done, int total, Clock::time_point start) {
  const bool stop_flag = o.cancel && o.cancel->load();
  const bool stop_cb = o.progress && !o.progress(done, total, seconds_since(start));
  if (stop_flag || stop_cb)
    throw Cancelled("sampling cancelled after step " + std::to_string(done) + " of " +
                    std::to_string(total));
}

void check_request(const Request& r, const H3Config& c) {
  const SequenceLayout& L = r.layout;
  H3RT_CHECK(static_cast<int64_t>(r.video_rows.size()) == L.video_rows() * c.video_features(),
             "request: ", r.video_rows.size(), " video values, expected [", L.video_rows(), ", ",
             c.video_features(), "]");
  H3RT_CHECK(static_cast<int64_t>(r.audio_rows.size()) == L.audio_rows() * c.audio_channels,
             "request: ", r.audio_rows.size(), " audio values, expected [", L.audio_rows(), ", ",
             c.audio_channels, "]");
  H3RT_CHECK(static_cast<int64_t>(r.text.size()) == L.text_len * c.text_dim,
             "request: ", r.text.size(), " text values, expected [", L.text_len, ", ", c.text_dim,
             "]");
}

}  // namespace

SampleResult sample(Denoiser& denoiser, Request req, const SampleOptions& o) {
  H3RT_CHECK(o.steps >= 1 && o.steps <= 1000, "steps must be in [1, 1000], got ", o.steps);
  const H3Config& c = denoiser.config();
  check_request(req, c);
  const SequenceLayout& L = req.layout;
  const SamplerPlan plan = make_sampler_plan(L, o.steps + 1, o.video_shift, o.audio_shift);
  const int evals = static_cast<int>(plan.steps.size());
  SampleResult res;
  const auto start = Clock::now();
  check_go_on(o, 0, evals, start);
  for (int i = 0; i < evals; ++i) {
    StageSeconds st;
    auto t0 = Clock::now();
    const SigmaSchedule schedule = sigma_schedule(plan, i);  // for PDD head banks
    ForwardInputs in{
        L,        plan.steps[i].plan, req.video_rows.data(), req.audio_rows.data(), req.text.data(),
        &schedule};
    in.step = i;  // names the step in finite-check errors; check_finite first checks step 0
    st.packing = seconds_since(t0);
    t0 = Clock::now();
    const ForwardOutputs v = denoiser.forward(in);
    st.denoiser = seconds_since(t0);
    t0 = Clock::now();
    sampler_step(plan, i, req.video_rows.data(), v.video_velocity.data(),
                 static_cast<int64_t>(req.video_rows.size()), req.audio_rows.data(),
                 v.audio_velocity.data(), static_cast<int64_t>(req.audio_rows.size()));
    st.sampler_update = seconds_since(t0);
    res.stages.push_back(st);
    check_go_on(o, i + 1, evals, start);
  }
  const auto t0 = Clock::now();
  res.video_latents =
      unpatchify_video(req.video_rows.data(), c.in_channels, L.frames, L.height, L.width);
  res.audio_latents = audio_rows_to_latents(req.audio_rows.data(), c.audio_channels, L.audio_len);
  res.video_shape = {1, c.in_channels, L.frames, L.height, L.width};
  res.audio_shape = {2, c.audio_channels, L.audio_len};
  if (!res.stages.empty()) res.stages.back().output_transform = seconds_since(t0);
  return res;
}

ForwardOutputs forward_at_sigma(Denoiser& denoiser, const SequenceLayout& layout,
                                const float* video_rows, const float* audio_rows, const float* text,
                                float sigma, const std::vector<float>& sample_sigmas) {
  H3RT_CHECK(std::isfinite(sigma) && sigma >= 0.0f && sigma <= 1.0f,
             "sigma must lie in [0, 1], got ", sigma);
  const float sigma_a = audio_sigma_from_video(sigma);
  const TimestepPlan plan = make_timestep_plan(layout, 1.0f - sigma, 1.0f - sigma_a);
  const SigmaSchedule schedule{sigma, sample_sigmas};
  const ForwardInputs in{layout,     plan, video_rows,
                         audio_rows, text, sample_sigmas.empty() ? nullptr : &schedule};
  return denoiser.forward(in);
}

}  // namespace h3rt
