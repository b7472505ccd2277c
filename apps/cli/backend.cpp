#include "cli/backend.h"

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

std::unique_ptr<Backend> Backend::create(const ModelOptions& o, const std::string& device,
                                         [[maybe_unused]] bool cuda_graph, bool sage_attention) {
  H3RT_CHECK(!sage_attention || device == "cuda",
             "--attention sage runs on the GPU only (--device cuda); the CPU runs the reference "
             "attention");
  if (device == "cpu") return std::make_unique<CpuBackend>(o.load(), o.parsed_precision());
  H3RT_CHECK(device == "cuda", "unknown device '", device, "' (cpu or cuda)");
#ifdef H3RT_HAVE_CUDA
  H3RT_CHECK(cuda::cuda_device_available(), "--device cuda: no CUDA device is available");
  H3RT_CHECK(o.parsed_precision() == Precision::bf16,
             "--device cuda runs bf16 only; use --precision bf16 (or the CPU for fp32)");
  if (o.checkpoint.empty()) {
    H3RT_CHECK(o.qkv_override.empty(), "--qkv-override needs --checkpoint");
    const std::string name = o.preset.empty() ? "tiny" : o.preset;
    return std::make_unique<CudaBackend>(
        model::make_synthetic_device_model(*config_preset(name), o.weights_seed), cuda_graph,
        sage_attention);
  }
  return std::make_unique<CudaBackend>(model::upload_model(o.load()), cuda_graph, sage_attention);
#else
  H3RT_FAIL("--device cuda: this h3rt was built without CUDA (configure with nvcc available)");
#endif
}

}  // namespace h3rt::cli
