// The GPU router (router.h gives the rules): chooses exactly the CPU reference's blocks, on the
// device, with no host synchronization (capturable in a CUDA graph). Two launches:
//   pool:  per (head, query tile or key block), one thread per channel: the pooled mean of the
//          bf16 q (k) rows, the same sequential fp32 sum as route_cpu.
//   route: per (head, query tile): the scores of every key block (fma chains), the row's mean and
//          deviation (one thread, sequentially), z-scores, forced and optional blocks, the
//          max_blocks ranks, then the ascending list written by one warp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "ops/attention_sparse/router.h"

namespace h3rt::attention_sparse {

struct RouterCudaParams {
  // bf16 rows, head h at columns [h*128, (h+1)*128) (the q and k column blocks of the QKV rows).
  const __nv_bfloat16* q = nullptr;
  const __nv_bfloat16* k = nullptr;
  int64_t q_row_stride = 0, k_row_stride = 0;  // elements
  RouterShape shape;                           // head_dim 128
  SparseAttention cfg;
  void* workspace = nullptr;  // router_workspace_bytes(shape); no initialisation needed
  size_t workspace_bytes = 0;
  unsigned long long* stats = nullptr;  // optional device [2]: += computed, += total pairs
  const uint8_t* dense_heads = nullptr;  // optional device [heads]: nonzero = every key block
};

size_t router_workspace_bytes(const RouterShape& shape);
// The block lists the router writes into `workspace` (device pointers).
BlockList router_lists(void* workspace, const RouterShape& shape);

// Throws h3rt::Error for bad arguments (check_router_args); returns CUDA launch errors.
cudaError_t route_cuda(const RouterCudaParams& p, cudaStream_t stream);

}  // namespace h3rt::attention_sparse
