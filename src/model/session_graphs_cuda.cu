// The CUDA graphs of the GPU forward session (session_graphs_cuda.h).
#include <chrono>
#include <cstdio>
#include <exception>

#include "cuda/runtime.h"
#include "model/session_graphs_cuda.h"
#include "model/session_util_cuda.h"

namespace h3rt::model {

StepGraphs::~StepGraphs() {
  for (auto& [k, g] : graphs_) cudaGraphExecDestroy(g);
}

void StepGraphs::clear() {
  for (auto& [k, g] : graphs_) H3RT_CUDA_CHECK(cudaGraphExecDestroy(g));
  graphs_.clear();
  warmed_.clear();
}

bool StepGraphs::capture(const Key& key, const std::function<void(bool timed)>& enqueue,
                         cudaStream_t s) {
  cudaGraph_t g = nullptr;
  H3RT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue(false);
  } catch (const std::exception& e) {
    cudaStreamEndCapture(s, &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    std::fprintf(stderr, "h3rt: CUDA graph capture failed (%s); running eagerly\n", e.what());
    failed_ = true;
    return false;
  }
  cudaError_t err = cudaStreamEndCapture(s, &g);
  cudaGraphExec_t exec = nullptr;
  if (err == cudaSuccess) err = cudaGraphInstantiate(&exec, g, 0);
  if (err == cudaSuccess) {
    size_t nodes = 0;
    cudaGraphGetNodes(g, nullptr, &nodes);
    last_nodes_ = static_cast<int64_t>(nodes);
  }
  if (g) cudaGraphDestroy(g);
  if (err != cudaSuccess) {
    cudaGetLastError();
    std::fprintf(stderr, "h3rt: CUDA graph capture failed (%s); running eagerly\n",
                 cudaGetErrorString(err));
    failed_ = true;
    return false;
  }
  graphs_[key] = exec;
  return true;
}

bool StepGraphs::launch(const Key& key, const Key& warm, bool allowed, bool stage_timing,
                        const std::function<void(bool timed)>& enqueue, cudaStream_t s,
                        double& capture_ms) {
  const auto t0 = std::chrono::steady_clock::now();
  bool captured = false;
  const bool use_graph = allowed && !failed_ && warmed_[warm] &&
                         (graphs_.count(key) || (captured = capture(key, enqueue, s)));
  if (captured) capture_ms += ms_since(t0);
  if (use_graph)
    H3RT_CUDA_CHECK(cudaGraphLaunch(graphs_.at(key), s));
  else
    enqueue(stage_timing);
  warmed_[warm] = true;
  return use_graph;
}

}  // namespace h3rt::model
