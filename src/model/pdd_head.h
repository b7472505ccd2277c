// PDD head banks (ComfyUI's FinalLayer with n > 1): final_layer.video_out / audio_out hold n row
// blocks; block 0 is a full head and blocks 1..n-1 are offsets from it. A step consumes the
// dt-weighted mean of the heads its sigma interval spans:
//   i = argmin |sample_sigmas - sigma| (the first on ties), sigma_next = sample_sigmas[min(i+1,
//   len-1)]; start, stop = round((1 - time_shift_sigma(s, shift_video, 1)) * n) for s in (sigma,
//   sigma_next) (float32 tensor arithmetic, then round half to even in double);
//   start = min(start, n-1); stop = max(stop, start+1).
//   grid = linspace(1, 0, n+1) (float64); dt = diff(1 - f*grid / (1 + (f-1)*grid))[start:stop]
//   with f the head's flow shift (video 12, audio 3); w = float32(dt / sum(dt)).
//   W = W[0] + sum_{j = max(start,1)}^{stop-1} w[j - start] W[j], bias likewise (float32; the
//   weighted sum accumulates in double, then one rounding, then + W[0]).
#pragma once

#include <cstdint>
#include <vector>

#include "h3rt/model.h"

namespace h3rt::model {

struct PddSpan {
  int64_t start = 0, stop = 1;  // heads [start, stop)
};

// time_shift_sigma(sigma, from, 1) in float32 ops, as ComfyUI computes it on a 0-d tensor:
// sigma / (from + sigma * (1 - from)).
float pdd_base_sigma(float sigma, float from_shift);

PddSpan pdd_span(int64_t n, const SigmaSchedule& schedule);
std::vector<float> pdd_weights(int64_t n, const PddSpan& span, double flow_shift);  // [stop-start]

// The effective head of a bank [n*out, in] (bias [n*out]).
LinearWeight pdd_effective_head(const LinearWeight& bank, int64_t n, const PddSpan& span,
                                const std::vector<float>& weights);

// Throws when the config has a PDD bank and there is no schedule (or no sample_sigmas).
void check_pdd_schedule(const H3Config& config, const SigmaSchedule* schedule);

struct OutputHeads {
  LinearWeight video, audio;
};
// The heads of one forward: the bank's effective heads for the schedule. Throws when the bank
// has no schedule to pick from.
OutputHeads pdd_output_heads(const H3Config& config, const H3Weights& weights,
                             const SigmaSchedule* schedule);

}  // namespace h3rt::model
