#include "cli/backend.h"

#include <cstdio>

#ifdef H3RT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "model/forward_session_cuda.h"
#include "model/model_cuda.h"
#endif

namespace h3rt::cli {
namespace {

class CpuBackend : public Backend {
 public:
  CpuBackend(H3Model m, Precision p) : model_(std::move(m)), precision_(p) {}
  const H3Config& config() const override { return model_.config; }
  ForwardOutputs forward(const ForwardInputs& in) override {
    return forward_cpu(model_, in, precision_);
  }
  std::string device_name() const override { return "cpu"; }
  Precision precision() const override { return precision_; }

 private:
  H3Model model_;
  Precision precision_;
};

#ifdef H3RT_HAVE_CUDA
class CudaBackend : public Backend {
 public:
  CudaBackend(model::DeviceModel m, bool cuda_graph, bool sage) : model_(std::move(m)) {
    options_.cuda_graph = cuda_graph;
    if (sage) options_.attention = ops::AttentionKernel::sage_8bit;
  }
  const H3Config& config() const override { return model_.config; }
  // One session per request shape: a sampling loop pays the per-request work once.
  ForwardOutputs forward(const ForwardInputs& in) override {
    if (!session_ || !session_->matches(in.layout)) {
      session_.reset();  // its buffers return to the arena first
      session_ = std::make_unique<model::ForwardSessionCuda>(model_, in.layout, options_);
    }
    return session_->forward(in);
  }
  std::string device_name() const override {
    cudaDeviceProp p{};
    int d = 0;
    cudaGetDevice(&d);
    cudaGetDeviceProperties(&p, d);
    return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ")";
  }
  Precision precision() const override { return Precision::bf16; }
  std::pair<int64_t, int64_t> device_peak_bytes() const override {
    const auto st = cuda::default_arena().stats();
    return {st.peak_allocated, st.peak_reserved};
  }

 private:
  model::DeviceModel model_;  // outlives session_ (declared first)
  model::ForwardSessionOptions options_;
  std::unique_ptr<model::ForwardSessionCuda> session_;
};
#endif

}  // namespace

std::string default_precision(const std::string& device) {
  return device == "cuda" ? "bf16" : "fp32";
}

void add_fp8_activations_option(CLI::App* cmd, std::string* value) {
  if (value->empty()) *value = "static";
  cmd->add_option("--fp8-activations", *value,
                  "fp8_scaled block projections (qkv, out, fc1, fc2) without an input_scale: "
                  "static (the default, as ComfyUI: dequantized weights, unquantized "
                  "activations) or dynamic (activations quantized to e4m3 with the per-call "
                  "scale amax|x|/448, fp8 GEMMs on the GPU, the same rule on the CPU "
                  "reference). Layers with an input_scale always use it; other layers are "
                  "unaffected")
      ->check(CLI::IsMember({"static", "dynamic"}))
      ->capture_default_str();
}

Fp8Activations parse_fp8_activations(const std::string& value) {
  if (value.empty() || value == "static") return Fp8Activations::static_scale;
  H3RT_CHECK(value == "dynamic", "--fp8-activations must be static or dynamic, got '", value, "'");
  return Fp8Activations::dynamic;
}

namespace {

// The checkpoint's model with the fp8 activation mode applied (says when dynamic changes nothing).
H3Model load_with(const ModelOptions& o, const BackendOptions& b) {
  H3Model m = o.load();
  if (set_fp8_activations(m, b.fp8_activations) == 0 &&
      b.fp8_activations == Fp8Activations::dynamic)
    std::fprintf(stderr,
                 "h3rt: --fp8-activations dynamic: the model has no fp8_scaled block projection "
                 "without input_scale; nothing changes\n");
  return m;
}

}  // namespace

std::unique_ptr<Backend> Backend::create(const ModelOptions& o, const std::string& device,
                                         const BackendOptions& b) {
  H3RT_CHECK(!b.sage_attention || device == "cuda",
             "--attention sage runs on the GPU only (--device cuda); the CPU runs the reference "
             "attention");
  if (device == "cpu") return std::make_unique<CpuBackend>(load_with(o, b), o.parsed_precision());
  H3RT_CHECK(device == "cuda", "unknown device '", device, "' (cpu or cuda)");
#ifdef H3RT_HAVE_CUDA
  H3RT_CHECK(cuda::cuda_device_available(), "--device cuda: no CUDA device is available");
  H3RT_CHECK(o.parsed_precision() == Precision::bf16,
             "--device cuda runs bf16 only; use --precision bf16 (or the CPU for fp32)");
  if (o.checkpoint.empty()) {
    H3RT_CHECK(o.qkv_override.empty(), "--qkv-override needs --checkpoint");
    const std::string name = o.preset.empty() ? "tiny" : o.preset;
    if (b.fp8_activations == Fp8Activations::dynamic)
      std::fprintf(stderr,
                   "h3rt: --fp8-activations dynamic: synthetic weights are bf16; nothing "
                   "changes\n");
    return std::make_unique<CudaBackend>(
        model::make_synthetic_device_model(*config_preset(name), o.weights_seed), b.cuda_graph,
        b.sage_attention);
  }
  return std::make_unique<CudaBackend>(model::upload_model(load_with(o, b)), b.cuda_graph,
                                       b.sage_attention);
#else
  H3RT_FAIL("--device cuda: this h3rt was built without CUDA (configure with nvcc available)");
#endif
}

}  // namespace h3rt::cli
