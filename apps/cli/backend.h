// The compute backend a verb runs on: the CPU reference (fp32 or bf16 semantics) or the CUDA
// backend (bf16). Both take the same host inputs and return the same host outputs.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "cli/request.h"
#include "h3rt/model.h"

namespace h3rt::cli {

class Backend {
 public:
  // device: "cpu" or "cuda". Loads (or synthesizes) the model where it will run. The CUDA
  // backend keeps a forward session per request shape (per-request work done once) and, with
  // cuda_graph, replays warm steps from CUDA graphs; sage_attention runs the blocks' attention
  // with the 8-bit Sage kernel (CUDA only).
  static std::unique_ptr<Backend> create(const ModelOptions& options, const std::string& device,
                                         bool cuda_graph = true, bool sage_attention = false);
  virtual ~Backend() = default;
  virtual const H3Config& config() const = 0;
  virtual ForwardOutputs forward(const ForwardInputs& inputs) = 0;
  virtual std::string device_name() const = 0;
  virtual Precision precision() const = 0;
  // Peak device bytes (allocated, reserved) of the caching arena; zeros on the CPU.
  virtual std::pair<int64_t, int64_t> device_peak_bytes() const { return {0, 0}; }
};

// "fp32" on the CPU and "bf16" on CUDA unless --precision says otherwise.
std::string default_precision(const std::string& device);

}  // namespace h3rt::cli
