// Runs a unit of GPU work (a block's CUDA graph, one attention call) back to back for a few
// seconds with the telemetry around the whole run: how it behaves once the card has reached its
// power limit, which short medians of a few repetitions do not show.
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include "bench/telemetry.h"

namespace h3rt::bench {

// Calls `launch_one` (which enqueues one unit on `s`, no host wait) ceil(seconds / unit_ms) times,
// at least 3, then waits for the stream: the energy counter before and after, the samples of
// `t` (started by the caller) over the host wall time in between.
SustainedRun run_sustained(TelemetrySampler& t, double unit_ms, double seconds,
                           const std::function<void()>& launch_one, cudaStream_t s);

}  // namespace h3rt::bench
