// Block-sparse attention in the GPU forward session (session_sparse_cuda.h).
#include <algorithm>
#include <cstring>

#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "h3rt/memory.h"
#include "model/session_sparse_cuda.h"
#include "ops/attention_sparse/router.h"

namespace h3rt::model {

SessionSparse::SessionSparse(const SequenceLayout& layout, int64_t rows, int64_t blocks,
                             int64_t heads)
    : layout_(layout), rows_(rows), blocks_(blocks), heads_(heads) {}

void SessionSparse::prepare(const SparseAttention* cfg, SparseCheck* chk, BlockCudaBuffers& b,
                            cudaStream_t s) {
  on_ = cfg && cfg->enabled();
  checking_ = nullptr;
  checked_blocks_.clear();
  if (!on_) return;
  H3RT_CHECK(b.attention == ops::AttentionKernel::sage_8bit,
             "sparse attention needs --attention sage (this session runs the bf16 attention "
             "kernel)");
  cfg_ = *cfg;
  prefix_rows_ = attention_sparse::prefix_rows_of(layout_);
  attention_sparse::check_router_args({rows_, heads_, 128, 1, prefix_rows_}, cfg_);
  ensure_sparse_buffers(b);
  if (!h_stats_.as<void>()) h_stats_ = cuda::Pinned(b.sparse_stats.nbytes());
  upload_dense_heads(chk, s);
  if (chk && chk->checking()) prepare_check(*chk, s);
}

// The stream is idle here (forward waited for the last step), so the pinned copy is free.
void SessionSparse::upload_dense_heads(SparseCheck* chk, cudaStream_t s) {
  const int64_t n = blocks_ * heads_;
  if (!dense_heads_.defined()) {
    dense_heads_ = cuda::device_empty(DType::u8, {n});
    H3RT_CUDA_CHECK(cudaMemset(dense_heads_.data(), 0, n));
    dense_heads_uploaded_.assign(n, 0);
    h_dense_heads_ = cuda::Pinned(n);
  }
  if (chk) chk->shape(blocks_, heads_);
  const std::vector<uint8_t> want = chk ? chk->dense() : std::vector<uint8_t>(n, 0);
  if (want == dense_heads_uploaded_) return;
  std::memcpy(h_dense_heads_.as<void>(), want.data(), n);
  H3RT_CUDA_CHECK(cudaMemcpyAsync(dense_heads_.data(), h_dense_heads_.as<void>(), n,
                                  cudaMemcpyHostToDevice, s));
  dense_heads_uploaded_ = want;
}

void SessionSparse::prepare_check(SparseCheck& chk, cudaStream_t s) {
  if (!sums_dev_.defined()) {
    const MemoryScope scope("the sparse check's buffers");
    tiles_dev_ = cuda::device_empty(DType::i32, {blocks_ * kMaxCheckTiles});
    sums_dev_ = cuda::device_empty(DType::f64, {blocks_ * heads_ * 2});
    const auto ws =
        static_cast<int64_t>(ops::attention_sparse_check_workspace_bytes(rows_, heads_));
    workspace_ = cuda::device_empty(DType::u8, {ws});
    h_tiles_ = cuda::Pinned(tiles_dev_.nbytes());
    h_sums_ = cuda::Pinned(sums_dev_.nbytes());
  }
  const int64_t q_tile = ops::attention_sparse_query_tile(), nq = (rows_ + q_tile - 1) / q_tile;
  const int64_t first = sparse_check_first_tile(cfg_, prefix_rows_, q_tile);
  tiles_.assign(blocks_, {});
  auto* staged = h_tiles_.as<int32_t>();
  for (int64_t i = std::max<int64_t>(cfg_.dense_blocks, 0); i < blocks_; ++i) {
    tiles_[i] = chk.tiles(i, first, nq);
    H3RT_CHECK(static_cast<int64_t>(tiles_[i].size()) <= kMaxCheckTiles, "sparse check: more than ",
               kMaxCheckTiles, " tiles");
    for (size_t k = 0; k < tiles_[i].size(); ++k)
      staged[i * kMaxCheckTiles + k] = static_cast<int32_t>(tiles_[i][k]);
  }
  H3RT_CUDA_CHECK(
      cudaMemcpyAsync(tiles_dev_.data(), staged, tiles_dev_.nbytes(), cudaMemcpyHostToDevice, s));
  checking_ = &chk;
}

BlockSparse SessionSparse::block(int64_t i, ops::SparseCheckCudaParams& chk) {
  BlockSparse bs{&cfg_, prefix_rows_};
  if (!on_) return bs;
  bs.dense_heads = dense_heads_.ptr<uint8_t>() + i * heads_;
  if (!checking_ || tiles_[i].empty()) return bs;
  chk.tiles = tiles_dev_.ptr<int32_t>() + i * kMaxCheckTiles;
  chk.n_tiles = static_cast<int>(tiles_[i].size());
  chk.workspace = workspace_.data();
  chk.workspace_bytes = workspace_.nbytes();
  chk.sums = sums_dev_.ptr<double>() + i * heads_ * 2;
  bs.check = &chk;
  checked_blocks_.push_back(i);
  return bs;
}

void SessionSparse::enqueue_reset(BlockCudaBuffers& b, cudaStream_t s) const {
  if (on_) H3RT_CUDA_CHECK(cudaMemsetAsync(b.sparse_stats.data(), 0, b.sparse_stats.nbytes(), s));
}

void SessionSparse::enqueue_readback(const BlockCudaBuffers& b, cudaStream_t s) const {
  if (on_)
    H3RT_CUDA_CHECK(cudaMemcpyAsync(h_stats_.as<void>(), b.sparse_stats.data(),
                                    b.sparse_stats.nbytes(), cudaMemcpyDeviceToHost, s));
  if (checking_)
    H3RT_CUDA_CHECK(cudaMemcpyAsync(h_sums_.as<void>(), sums_dev_.data(), sums_dev_.nbytes(),
                                    cudaMemcpyDeviceToHost, s));
}

void SessionSparse::finish_check() {
  if (!checking_) return;
  const double* sums = h_sums_.as<double>();
  std::vector<double> diff(heads_), ref(heads_);
  for (const int64_t i : checked_blocks_) {
    for (int64_t h = 0; h < heads_; ++h) {
      diff[h] = sums[(i * heads_ + h) * 2];
      ref[h] = sums[(i * heads_ + h) * 2 + 1];
    }
    checking_->record(i, static_cast<int>(tiles_[i].size()), diff.data(), ref.data());
  }
  checking_ = nullptr;
}

void SessionSparse::add_stats(SparseStats* out) const {
  if (!on_ || !out) return;
  const auto* n = h_stats_.as<unsigned long long>();
  out->key_blocks_computed += static_cast<int64_t>(n[0]);
  out->key_blocks_total += static_cast<int64_t>(n[1]);
}

}  // namespace h3rt::model
