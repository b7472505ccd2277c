// The GPU router (router_cuda.h); its arithmetic is router_rules.h, shared with route_cpu.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "h3rt/check.h"
#include "ops/attention_sparse/router_cuda.h"
#include "ops/attention_sparse/router_rules.h"

namespace h3rt::attention_sparse {
namespace {

constexpr int kD = 128;
constexpr int kRouteThreads = 256;

struct Layout {  // offsets of the workspace parts (bytes, 256-aligned)
  size_t qbar, kbar, index, count, end;
};
size_t align256(size_t x) {
  return (x + 255) / 256 * 256;
}
Layout layout_of(const RouterShape& s) {
  const size_t H = s.heads, nq = s.n_qtiles(), nk = s.n_kblocks();
  Layout l;
  l.qbar = 0;
  l.kbar = align256(l.qbar + H * nq * kD * 4);
  l.index = align256(l.kbar + H * kD * nk * 4);
  l.count = align256(l.index + H * nq * nk * 4);
  l.end = align256(l.count + H * nq * 4);
  return l;
}

struct PoolArgs {
  const __nv_bfloat16 *q, *k;
  int64_t q_stride, k_stride;
  int seq, q_tile, nq, nk;
  float* qbar;  // [H][nq][128]
  float* kbar;  // [H][128][nk] (transposed: the route kernel reads a channel across key blocks)
};

// Block (x, h): x < nq pools query tile x, else key block x - nq; thread d = channel.
__global__ void __launch_bounds__(kD) pool_kernel(PoolArgs a) {
  const int h = blockIdx.y, d = threadIdx.x;
  const bool is_q = static_cast<int>(blockIdx.x) < a.nq;
  const int g = is_q ? blockIdx.x : blockIdx.x - a.nq;
  const int group = is_q ? a.q_tile : static_cast<int>(kKeyBlock);
  const int r0 = g * group, rows = min(group, a.seq - r0);
  const int64_t stride = is_q ? a.q_stride : a.k_stride;
  const __nv_bfloat16* base = (is_q ? a.q : a.k) + r0 * stride + h * kD + d;
  const float m =
      rules::pooled_mean([&](int64_t i) { return __bfloat162float(base[i * stride]); }, rows);
  if (is_q)
    a.qbar[(static_cast<int64_t>(h) * a.nq + g) * kD + d] = m;
  else
    a.kbar[(static_cast<int64_t>(h) * kD + d) * a.nk + g] = m;
}

struct RouteArgs {
  const float *qbar, *kbar;
  int32_t *index, *count;
  unsigned long long* stats;
  const uint8_t* dense_heads;
  int seq, q_tile, nq, nk;
  int64_t prefix_rows, band, max_blocks;
  float tau;
  bool video_rows_only;
};

__global__ void __launch_bounds__(kRouteThreads) route_kernel(RouteArgs a) {
  extern __shared__ float sm[];
  float* qb = sm;                                           // [128]
  float* score = qb + kD;                                   // [nk]
  float* z = score + a.nk;                                  // [nk]
  auto* cand = reinterpret_cast<unsigned char*>(z + a.nk);  // [nk]
  unsigned char* keep = cand + a.nk;                        // [nk]
  __shared__ rules::RowStats st;
  const int h = blockIdx.y, tile = blockIdx.x, tid = threadIdx.x;
  const int64_t t = static_cast<int64_t>(h) * a.nq + tile;
  for (int d = tid; d < kD; d += blockDim.x) qb[d] = a.qbar[t * kD + d];
  __syncthreads();
  const float* kh = a.kbar + static_cast<int64_t>(h) * kD * a.nk;
  for (int j = tid; j < a.nk; j += blockDim.x)
    score[j] = rules::dot([&](int64_t d) { return qb[d]; },
                          [&](int64_t d) { return kh[d * a.nk + j]; }, kD);
  __syncthreads();
  if (tid == 0) st = rules::row_stats(score, a.nk);
  __syncthreads();
  rules::TileRule rule =
      rules::tile_rule(tile, a.q_tile, a.seq, a.prefix_rows, a.band, a.video_rows_only, kKeyBlock);
  rule.dense = rule.dense || (a.dense_heads && a.dense_heads[h]);
  for (int j = tid; j < a.nk; j += blockDim.x) {
    z[j] = rules::z_score(score[j], st);
    cand[j] = !rule.forced(j) && z[j] >= a.tau;
  }
  __syncthreads();
  for (int j = tid; j < a.nk; j += blockDim.x)
    keep[j] = rule.forced(j) ||
              (cand[j] && (a.max_blocks <= 0 || rules::rank_of(j, z, cand, a.nk) < a.max_blocks));
  __syncthreads();
  if (tid >= 32) return;
  // Warp 0 writes the kept indices in ascending order, 32 candidates a round.
  int32_t* out = a.index + t * a.nk;
  int n = 0;
  for (int j0 = 0; j0 < a.nk; j0 += 32) {
    const int j = j0 + tid;
    const bool k = j < a.nk && keep[j];
    const unsigned mask = __ballot_sync(0xffffffffu, k);
    if (k) out[n + __popc(mask & ((1u << tid) - 1u))] = j;
    n += __popc(mask);
  }
  if (tid == 0) {
    a.count[t] = n;
    if (a.stats) {
      atomicAdd(a.stats, static_cast<unsigned long long>(n));
      atomicAdd(a.stats + 1, static_cast<unsigned long long>(a.nk));
    }
  }
}

size_t route_smem(int nk) {
  return kD * 4 + static_cast<size_t>(nk) * (4 + 4 + 1 + 1);
}

}  // namespace

size_t router_workspace_bytes(const RouterShape& shape) {
  return layout_of(shape).end;
}

BlockList router_lists(void* workspace, const RouterShape& s) {
  const Layout l = layout_of(s);
  auto* base = static_cast<char*>(workspace);
  return {reinterpret_cast<const int32_t*>(base + l.index),
          reinterpret_cast<const int32_t*>(base + l.count),
          s.heads,
          s.q_tile,
          s.n_qtiles(),
          s.n_kblocks()};
}

cudaError_t route_cuda(const RouterCudaParams& p, cudaStream_t stream) {
  const RouterShape& s = p.shape;
  check_router_args(s, p.cfg);
  H3RT_CHECK(s.head_dim == kD, "sparse router (CUDA): head_dim ", s.head_dim, " must be ", kD);
  H3RT_CHECK(p.q && p.k && p.q_row_stride >= s.heads * kD && p.k_row_stride >= s.heads * kD,
             "sparse router (CUDA): q/k null or row stride < heads*128");
  H3RT_CHECK(s.seq <= (1 << 30) && s.heads <= 65535, "sparse router (CUDA): shape too large");
  const size_t need = router_workspace_bytes(s);
  H3RT_CHECK(p.workspace && p.workspace_bytes >= need, "sparse router (CUDA): workspace of ",
             p.workspace_bytes, " bytes, needs ", need);
  const int nq = static_cast<int>(s.n_qtiles()), nk = static_cast<int>(s.n_kblocks());
  const size_t smem = route_smem(nk);
  H3RT_CHECK(smem <= 48 * 1024, "sparse router (CUDA): ", nk,
             " key blocks exceed the route kernel's shared memory");
  const Layout l = layout_of(s);
  auto* base = static_cast<char*>(p.workspace);
  auto* qbar = reinterpret_cast<float*>(base + l.qbar);
  auto* kbar = reinterpret_cast<float*>(base + l.kbar);
  const PoolArgs pa{p.q,
                    p.k,
                    p.q_row_stride,
                    p.k_row_stride,
                    static_cast<int>(s.seq),
                    static_cast<int>(s.q_tile),
                    nq,
                    nk,
                    qbar,
                    kbar};
  pool_kernel<<<dim3(nq + nk, static_cast<unsigned>(s.heads)), kD, 0, stream>>>(pa);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const RouteArgs ra{qbar,
                     kbar,
                     reinterpret_cast<int32_t*>(base + l.index),
                     reinterpret_cast<int32_t*>(base + l.count),
                     p.stats,
                     p.dense_heads,
                     static_cast<int>(s.seq),
                     static_cast<int>(s.q_tile),
                     nq,
                     nk,
                     s.prefix_rows,
                     p.cfg.band,
                     p.cfg.max_blocks,
                     p.cfg.tau,
                     p.cfg.video_rows_only};
  route_kernel<<<dim3(nq, static_cast<unsigned>(s.heads)), kRouteThreads, smem, stream>>>(ra);
  return cudaGetLastError();
}

}  // namespace h3rt::attention_sparse
