// The CUDA graphs of the GPU forward session: one per step part and configuration, captured the
// second time the same part runs (the first run is eager and warms it), replayed after that.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <tuple>

namespace h3rt::model {

class StepGraphs {
 public:
  // (table height M, finite checks in it, the step's part, then the sparse configuration baked
  // into it: on, tau, dense blocks, video rows only, band, max blocks).
  using Key = std::tuple<int64_t, bool, int, bool, float, int, bool, int, int64_t>;

  StepGraphs() = default;
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;
  ~StepGraphs();

  // Runs one part: from graph `key` once the part has run eagerly under `warm` and `allowed`
  // (graphs on, not a check step), else eagerly (`enqueue(timed)`, timed = `stage_timing`).
  // A failed capture prints one line and runs eagerly from then on. True when a graph ran;
  // `capture_ms` gains the time a capture took.
  bool launch(const Key& key, const Key& warm, bool allowed, bool stage_timing,
              const std::function<void(bool timed)>& enqueue, cudaStream_t s, double& capture_ms);

  void clear();  // the graphs hold buffer pointers that are going away
  bool failed() const { return failed_; }
  int64_t last_nodes() const { return last_nodes_; }
  int64_t count() const { return static_cast<int64_t>(graphs_.size()); }

 private:
  bool capture(const Key& key, const std::function<void(bool timed)>& enqueue, cudaStream_t s);

  std::map<Key, cudaGraphExec_t> graphs_;
  std::map<Key, bool> warmed_;
  bool failed_ = false;
  int64_t last_nodes_ = 0;
};

}  // namespace h3rt::model
