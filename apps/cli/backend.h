// The compute backend a verb runs on: the CPU reference (fp32 or bf16 semantics) or the CUDA
// backend (bf16). Both take the same host inputs and return the same host outputs.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "cli/request.h"
#include "h3rt/model.h"

namespace h3rt::cli {

struct BackendOptions {
  bool cuda_graph = true;       // CUDA: replay warm steps from CUDA graphs
  bool sage_attention = false;  // CUDA: the blocks' attention with the 8-bit Sage kernel
  // fp8_scaled block projections without input_scale: dequantized bf16 weights (static_scale,
  // the default) or e4m3 activations with per-call scales (dynamic; set_fp8_activations).
  Fp8Activations fp8_activations = Fp8Activations::static_scale;
};

// `--fp8-activations static|dynamic` on a verb, stored in *value; parse_fp8_activations reads it.
void add_fp8_activations_option(CLI::App* cmd, std::string* value);
Fp8Activations parse_fp8_activations(const std::string& value);

class Backend {
 public:
  // device: "cpu" or "cuda". Loads (or synthesizes) the model where it will run. The CUDA
  // backend keeps a forward session per request shape (per-request work done once) and, with
  // cuda_graph, replays warm steps from CUDA graphs; sage_attention runs the blocks' attention
  // with the 8-bit Sage kernel (CUDA only). fp8_activations applies to both devices.
  static std::unique_ptr<Backend> create(const ModelOptions& options, const std::string& device,
                                         const BackendOptions& backend = {});
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
