// A Denoiser for tests of sparse attention in the sampling loop (CPU and GPU): it runs each
// forward, then the same inputs through the dense forward (no sparsity, no check), and records
// whether the two gave the same bits.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "h3rt/pipeline.h"

namespace h3rt::test {

class DenseTwin : public Denoiser {
 public:
  explicit DenseTwin(const DenoiserOptions& o = {}) : inner_(Denoiser::create(ModelSource{}, o)) {}
  const H3Config& config() const override { return inner_->config(); }
  std::string device_name() const override { return inner_->device_name(); }
  Precision precision() const override { return inner_->precision(); }
  ForwardOutputs forward(const ForwardInputs& in) override {
    ForwardOutputs o = inner_->forward(in);
    ForwardInputs dense = in;
    dense.sparse = nullptr;
    dense.sparse_stats = nullptr;
    dense.sparse_check = nullptr;
    const ForwardOutputs ref = inner_->forward(dense);
    same.push_back(o.video_velocity == ref.video_velocity &&
                   o.audio_velocity == ref.audio_velocity);
    return o;
  }
  std::vector<bool> same;  // per forward: equal to the dense forward's bits

 private:
  std::unique_ptr<Denoiser> inner_;
};

}  // namespace h3rt::test
