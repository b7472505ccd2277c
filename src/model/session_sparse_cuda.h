// Block-sparse attention in the GPU forward session (h3rt/sparse.h) and its sampled check
// (h3rt/hybrid.h): the run's dense-head flags on the device, the check's tiles and sums, the
// counters read back after a step.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/pinned.h"
#include "h3rt/hybrid.h"
#include "h3rt/sparse.h"
#include "model/block_cuda.h"
#include "ops/attention/attention.h"

namespace h3rt::model {

class SessionSparse {
 public:
  SessionSparse(const SequenceLayout& layout, int64_t rows, int64_t blocks, int64_t heads);

  // Before the step (outside any capture): the configuration and the buffers it needs (in `b`),
  // the run's flags and, on a check step, its sampled tiles to the device.
  void prepare(const SparseAttention* cfg, SparseCheck* chk, BlockCudaBuffers& b, cudaStream_t s);

  bool on() const { return on_; }
  bool checking() const { return checking_ != nullptr; }
  const SparseAttention& cfg() const { return cfg_; }
  // Whether block i runs its attention sparse this step.
  bool sparse_block(int64_t i) const { return on_ && i >= cfg_.dense_blocks; }
  // Block i's sparse parameters: its dense-head flags and, on a check step with a sample in it,
  // its check (filled into `chk`, which must outlive the block's launch).
  BlockSparse block(int64_t i, ops::SparseCheckCudaParams& chk);

  // In the step: the counters start at zero (before the blocks); the counters and the check's
  // sums to pinned memory (after them).
  void enqueue_reset(BlockCudaBuffers& b, cudaStream_t s) const;
  void enqueue_readback(const BlockCudaBuffers& b, cudaStream_t s) const;

  // After the step's wait: each checked block's sums to the run's check (its decisions), and
  // what the sparse blocks computed.
  void finish_check();
  void add_stats(SparseStats* out) const;

 private:
  static constexpr int64_t kMaxCheckTiles = 64;  // slots a block
  void upload_dense_heads(SparseCheck* chk, cudaStream_t s);
  void prepare_check(SparseCheck& chk, cudaStream_t s);

  const SequenceLayout& layout_;
  const int64_t rows_, blocks_, heads_;
  bool on_ = false;
  SparseAttention cfg_;
  int64_t prefix_rows_ = 0;
  cuda::Pinned h_stats_;
  // The run's dense-head flags [blocks][heads], read by every sparse block's router (graphs
  // included; all zero without a check), uploaded before a step when they changed.
  Tensor dense_heads_;
  std::vector<uint8_t> dense_heads_uploaded_;
  cuda::Pinned h_dense_heads_;
  // A check step (run eagerly) samples tiles per sparse block and reads per-head sums back.
  SparseCheck* checking_ = nullptr;
  std::vector<std::vector<int64_t>> tiles_;
  std::vector<int64_t> checked_blocks_;  // blocks whose check this step enqueued
  Tensor tiles_dev_, sums_dev_, workspace_;
  cuda::Pinned h_tiles_, h_sums_;
};

}  // namespace h3rt::model
