// A reusable GPU forward for one request shape: everything that does not change between
// denoising steps is computed and uploaded once, and a step's device work can be replayed as
// one CUDA graph.
//
// Built once per (model, layout): the block activations, the RoPE cos/sin tables (host float32,
// computed once), staging buffers in pinned host memory, device inputs and outputs. Cached while
// their inputs stay the same (compared on the host each step):
//   - the text rows: condition_proj + the token refiner + its final norm depend on the text
//     embeddings only (no timestep, no RoPE; golden README section 5), so the refiner runs again
//     only when the text changes;
//   - the per-row AdaLN indices and timestep indices (a function of the timestep plan);
//   - silu(time embedding) rows (host float32, a function of the timestep values).
// A step then enqueues: staged inputs -> device, text rows copied into the packed stream, the
// patch projections, per block the AdaLN table GEMM + the block, the final AdaLN + norm + heads,
// velocities -> pinned host. The only host synchronisation is the wait for the velocities.
// A device forward (ForwardInputs::device) copies the caller's rows into the fixed input buffers
// and the velocities into the caller's buffers (D2D, outside the graphs), ordered after the
// caller's stream's prior work and before its later work by events, and returns without
// waiting unless finite checks or sparse counters need the host (the next forward then waits
// for it before refilling the pinned staging buffers).
//
// With cuda_graph on, the first step of a given table height (number of distinct timesteps M)
// runs eagerly (it creates the GEMM plans and workspaces) and the next one captures that
// sequence into a CUDA graph, replayed from then on; the graph reads the fixed staging buffers,
// which each step refills before the launch. If capture or instantiation fails the session
// says so once on stderr and stays eager. Graph and eager steps give identical bits.
//
// First-block step caching (ForwardInputs::step_cache, h3rt/hybrid.h) splits a step in two:
// part A (inputs, block 0, the relative L1 of block 0's residual against the cached one, that
// one double copied to pinned memory), a host wait for that double (the decision needs it; the
// only extra synchronisation), then part B: the cached residual added to block 0's output and
// the final layer (a reuse), or blocks 1..end, the cache refresh and the final layer. Each part
// is its own CUDA graph once warm (same bits as eager). The residual buffers (2 bf16 and 2 f32
// copies of the [S, H] stream) belong to the session, allocated on the first cached forward;
// the run's StepCache holds a token naming the session and its latest refresh. device_ms then
// includes the host wait between the parts.
//
// Streamed models (model/weight_stream_cuda.h): the session holds two device slots and a copy
// stream; block i + 2's weights copy while block i + 1 computes, in eager steps and graphs alike.
//
// Not thread-safe; one session per stream. The model must outlive the session.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "h3rt/model.h"
#include "model/model_cuda.h"

namespace h3rt::model {

struct ForwardSessionOptions {
  bool cuda_graph = true;
  // The blocks' attention: flash bf16 (the reference numerics) or Sage 8-bit (quality-gated).
  ops::AttentionKernel attention = ops::AttentionKernel::flash_bf16;
  bool stage_timing = false;  // CUDA events between stages of eager steps (for benchmarks)
  // Chain the blocks (block_cuda.h BlockChain: each block's gate_mlp residual runs in the next
  // block's norm1; same bits). The environment H3RT_BLOCK_CHAIN=0 turns it off for timings.
  bool chain_blocks = true;
};

// Measurements of the last forward (milliseconds).
struct ForwardStepTimes {
  bool graph = false;          // replayed from a CUDA graph
  bool text_refined = false;   // the refiner ran (the text changed)
  double host_prepare_ms = 0;  // host work before the device work: time embedding, cache checks,
                               // staging copies, uploads of changed index tables
  bool temb_ahead = false;     // the time embedding came from the previous call's look-ahead
  double ahead_ms = 0;         // host time of this call's look-ahead (ForwardInputs::
                               // next_timesteps), spent while its device work ran
  double text_refiner_ms = 0;  // condition_proj + refiner + final norm (GPU), when it ran
  double device_ms = 0;        // the step's device work (events around it); 0 for a device
                               // forward that returned without waiting
  double host_finish_ms = 0;   // wait for the device + copy of the velocities out of staging
  double wall_ms = 0;          // the whole call
  double capture_ms = 0;       // graph capture + instantiation, when this call captured
  // Eager steps with stage_timing: GPU time per stage ("inputs", "adaln_tables", "blocks",
  // "final_heads"), summed over the step.
  std::map<std::string, double> stage_ms;
  // Streamed block weights (DeviceModel::streamed): the busy time of the eager timed parts'
  // host-to-device copies and (file source) host gathers, which overlap each other
  // (stage_ms["weight_wait"] is how long the compute stream waited for them).
  bool weights_streamed = false;
  double weight_copy_ms = 0;
  double weight_gather_ms = 0;
};

class ForwardSessionCuda {
 public:
  ForwardSessionCuda(const DeviceModel& model, const SequenceLayout& layout,
                     const ForwardSessionOptions& options = {});
  ~ForwardSessionCuda();
  ForwardSessionCuda(const ForwardSessionCuda&) = delete;
  ForwardSessionCuda& operator=(const ForwardSessionCuda&) = delete;

  // One forward; `inputs.layout` must equal the session's layout (same shape and order).
  ForwardOutputs forward(const ForwardInputs& inputs);
  bool matches(const SequenceLayout& layout) const;  // a layout this session can run

  // Switches for later calls (benchmarks compare eager and graph steps on one session).
  void set_cuda_graph(bool on);
  void set_stage_timing(bool on);
  // Finite checks of later calls (off by default): the text rows, the packed input and each
  // block's output are checked on the device (one small reduction launch each, also inside a
  // captured graph; graphs with and without checks are kept apart) and forward() throws
  // NonFinite naming the first stage holding NaN or Inf. The outputs do not change.
  void set_check_finite(bool on);

  const ForwardStepTimes& last_times() const;
  bool graph_enabled() const;   // cuda_graph requested and no capture failure
  int64_t graph_nodes() const;  // nodes of the most recently captured graph, or 0
  int64_t graph_count() const;  // graphs captured (one per table height)
  cudaStream_t stream() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace h3rt::model
#endif  // H3RT_HAVE_CUDA
