// The ring pre-pass (SagePrepassAlgo::ring): the two_launch work (prepass.cu) in persistent
// kernels whose loads never wait for the arithmetic. A work item is (128-token chunk c, head h);
// its Q, K and V are 128 x 128 bf16 tiles of the QKV rows (32 KB each, one 2-D TMA load each,
// rows past S zero-filled). Tiles stream through shared-memory rings (one mbarrier per slot); a
// slot is refilled as soon as its consumers are done with it.
//   stats kernel    (items chunk-major, so the blocks in flight read whole token rows together;
//                   a 3-tile ring per block, 2 blocks per SM):
//                   Q -> int8 + scales; fixed-order partial K sums (threads 0..127) and V channel
//                   maxima (threads 128..255) of the chunk.
//   finish kernel   one block per head: the partials in chunk order -> k_mean, v_scale (a launch
//                   of its own: a per-item ticket needs a memory fence per item, which stalled
//                   the persistent blocks).
//   quantize kernel (items in reverse order: the first ones find the stats kernel's last tiles in
//                   L2): K - mean -> int8 + scales (warps 0..3), V -> e4m3 transposed (4..7),
//                   each half with its own one-tile ring, 3 blocks per SM.
// Outputs are bit-identical to two_launch (same helpers, same operation order).
#include <cuda.h>

#include <algorithm>

#include "cuda/runtime.h"
#include "cuda/sm90_async.cuh"
#include "cuda/tensor_map.h"
#include "ops/attention_sage/prepass_common.cuh"

namespace h3rt::attention_sage::prepass {
namespace {

constexpr int kThreads = 256;
constexpr int kTileBytes = kTokenPad * kD * 2;  // 32 KB
// Stats kernel: a ring of 3 tiles per block, two blocks per SM (their phases interleave).
constexpr int kStatSlots = 3, kStatBlocksPerSm = 2;
constexpr int kStatSmem = kStatSlots * kTileBytes + 8 * kStatSlots;
// Quantize kernel: one tile per half-block (K half, V half), three blocks per SM: six streams
// of tiles per SM, each refilled as soon as its half is done.
constexpr int kQuantBlocksPerSm = 3;
constexpr int kQuantSmem = 2 * kTileBytes + 16;

struct Ring {
  const CUtensorMap* map;
  unsigned char* tiles;
  uint32_t bars;  // `slots` mbarriers
  int slots;
  int64_t first, step, items, heads;
  int parts;     // tiles per item: 3 (Q, K, V) or 2 (K, V)
  bool reverse;  // items from last to first
  int part0;     // QKV part of the first tile (0: Q, 1: K)

  __device__ uint32_t bar(int64_t n) const { return bars + 8 * static_cast<uint32_t>(n % slots); }
  // The issuing thread: the n-th tile of this ring into its slot (nothing past the last item).
  __device__ void issue(int64_t n) const {
    const int64_t k = n / parts, item = first + k * step;
    if (item >= items) return;
    const int64_t it = reverse ? items - 1 - item : item, c = it / heads, h = it % heads;
    const int part = part0 + static_cast<int>(n % parts);
    unsigned char* dst = tiles + (n % slots) * kTileBytes;
    cuda::sm90::bar_expect_tx(bar(n), kTileBytes);
    cuda::sm90::tma_load_2d(cuda::sm90::smem_addr(dst), map, bar(n),
                            static_cast<int>((part * heads + h) * kD),
                            static_cast<int>(c * kTokenPad));
  }
  __device__ const uint16_t* wait(int64_t n) const {
    cuda::sm90::bar_wait(bar(n), static_cast<uint32_t>((n / slots) & 1));
    return reinterpret_cast<const uint16_t*>(tiles + (n % slots) * kTileBytes);
  }
  // The issuing thread: the barriers and the first `slots` tiles (a block barrier must follow
  // before anyone waits).
  __device__ void init() const {
    for (int s = 0; s < slots; ++s) cuda::sm90::bar_init(bars + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int s = 0; s < slots; ++s) issue(s);
  }
};

// Q of one chunk from its tile: warp w takes the row groups {16b+g, 16b+g+8} numbered w, w+8, ..;
// lane = (row, 8 channels). The 8 groups' loads are issued before any arithmetic.
__device__ void quantize_q_tile(const uint16_t* tile, const Dims& n, int64_t c, int64_t h,
                                float qk_log2, const SageBuffers& buf) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kPerWarp = 64 / (kThreads / 32);
  const int col = (lane % 16) * 8;
  uint4 w[kPerWarp];
#pragma unroll
  for (int i = 0; i < kPerWarp; ++i) {
    const int grp = warp + i * (kThreads / 32), blk = grp / 8, g = grp % 8;
    const int row = blk * kQWarpRows + g + (lane >= 16 ? 8 : 0);
    w[i] = *reinterpret_cast<const uint4*>(tile + row * kD + col);
  }
#pragma unroll
  for (int i = 0; i < kPerWarp; ++i) {
    const int grp = warp + i * (kThreads / 32), blk = grp / 8, g = grp % 8;
    const int64_t t = c * kTokenPad + blk * kQWarpRows + g + (lane >= 16 ? 8 : 0);
    float f[8];
    unpack8(w[i], f);
    float amax = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(f[e]));
    const float scale = dev_int8_scale(warp_max(amax)), inv = __frcp_rn(scale);
    const uint32_t lo = dev_pack_i8(f[0], f[1], f[2], f[3], inv);
    const uint32_t hi = dev_pack_i8(f[4], f[5], f[6], f[7], inv);
    *reinterpret_cast<uint2*>(buf.q8 + (h * n.padded + t) * kD + col) = make_uint2(lo, hi);
    if (lane == 0)
      buf.q_scale[h * (n.padded / kQWarpRows * 8) + (c * 8 + blk) * 8 + g] =
          __fmul_rn(scale, qk_log2);
  }
}

// Threads 0..127: the fixed-order partial K sums of the chunk; threads 128..255: its V channel
// maxima. Thread = (token residue r, 8 channels) of its half, as two_launch's chunk_stats.
__device__ void tile_stats(const uint16_t* kt, const uint16_t* vt, const Dims& n, int64_t c,
                           float (*part)[8][kD]) {
  const bool is_v = threadIdx.x >= 128;
  const int x = threadIdx.x % 128, r = x / 16, col = (x % 16) * 8;
  const uint16_t* tile = is_v ? vt : kt;
  float acc[8] = {};
#pragma unroll 4
  for (int j = 0; j < 16; ++j) {
    const int row = 8 * j + r;
    if (c * kTokenPad + row >= n.seq) break;
    float f[8];
    unpack8(*reinterpret_cast<const uint4*>(tile + row * kD + col), f);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      acc[i] = is_v ? fmaxf(acc[i], fabsf(f[i])) : __fadd_rn(acc[i], f[i]);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) part[is_v][r][col + i] = acc[i];
}

__global__ void __launch_bounds__(kThreads, kStatBlocksPerSm)
    ring_stats_kernel(const __grid_constant__ CUtensorMap map, Dims n, float qk_log2,
                      SageBuffers buf) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // never launched: the host runs this algorithm only on sm_90 and newer
#else
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float part[2][8][kD];
  const int64_t items = n.padded / kTokenPad * n.heads;
  const Ring ring{&map,       smem,       cuda::sm90::smem_addr(smem + kStatSlots * kTileBytes),
                  kStatSlots, blockIdx.x, gridDim.x,
                  items,      n.heads,    3,
                  false,      0};
  if (threadIdx.x == 0) ring.init();
  __syncthreads();
  int64_t t = 0;  // this block's tile counter
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x, t += 3) {
    const int64_t c = item / n.heads, h = item % n.heads;
    quantize_q_tile(ring.wait(t), n, c, h, qk_log2, buf);
    __syncthreads();  // the Q slot is free
    if (threadIdx.x == 0) ring.issue(t + kStatSlots);
    const uint16_t* kt = ring.wait(t + 1);
    const uint16_t* vt = ring.wait(t + 2);
    tile_stats(kt, vt, n, c, part);
    __syncthreads();  // the K and V slots are free; the partials are in shared memory
    if (threadIdx.x == 0) {
      ring.issue(t + 1 + kStatSlots);
      ring.issue(t + 2 + kStatSlots);
    }
    if (threadIdx.x < 2 * kD) {
      const int d = threadIdx.x % kD;
      const bool is_v = threadIdx.x >= kD;
      float acc = 0.0f;
      for (int rr = 0; rr < 8; ++rr)
        acc = is_v ? fmaxf(acc, part[1][rr][d]) : __fadd_rn(acc, part[0][rr][d]);
      (is_v ? buf.v_partial : buf.k_partial)[(c * n.heads + h) * kD + d] = acc;
    }
  }
#endif
}

// One block per head, thread = channel: the partials of all chunks, in chunk order.
__global__ void __launch_bounds__(kD) ring_finish_kernel(Dims n, SageBuffers buf) {
  finish_head<32, false>(n, blockIdx.x, buf, threadIdx.x);
}

__global__ void __launch_bounds__(kThreads, kQuantBlocksPerSm)
    ring_quantize_kernel(const __grid_constant__ CUtensorMap map, Dims n, SageBuffers buf) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // never launched: the host runs this algorithm only on sm_90 and newer
#else
  extern __shared__ __align__(128) unsigned char smem[];
  const int64_t items = n.padded / kTokenPad * n.heads;
  // Half 0 (warps 0..3) quantizes K, half 1 (warps 4..7) V, each through its own one-tile ring.
  const int half = threadIdx.x / 128;
  const Ring ring{&map,
                  smem + half * kTileBytes,
                  cuda::sm90::smem_addr(smem + 2 * kTileBytes) + 8 * half,
                  1,
                  blockIdx.x,
                  gridDim.x,
                  items,
                  n.heads,
                  1,
                  true,
                  1 + half};
  if (threadIdx.x % 128 == 0) ring.init();
  __syncthreads();
  int64_t t = 0;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x, ++t) {
    const int64_t it = items - 1 - item, c = it / n.heads, h = it % n.heads;
    const uint16_t* tile = ring.wait(t);
    if (half == 0)
      quantize_k_chunk(n, c, h, tile, buf);
    else
      quantize_v_chunk(n, c, h, tile, buf, threadIdx.x - 128);
    cuda::sm90::named_sync(1 + half, 128);  // this half is done with its tile
    if (threadIdx.x % 128 == 0) ring.issue(t + 1);
  }
#endif
}

}  // namespace

cudaError_t launch_ring(const uint16_t* qkv, const Dims& n, float qk_log2, const SageBuffers& buf,
                        cudaStream_t stream) {
  const int cc = cuda::current_device_cc();
  if (cuda::compiled_arch_supports(cc / 10, cc % 10) < 90) return cudaErrorNotSupported;
  const int g1 =
      cuda::resident_grid(reinterpret_cast<const void*>(ring_stats_kernel), kThreads, kStatSmem, 9);
  const int g2 = cuda::resident_grid(reinterpret_cast<const void*>(ring_quantize_kernel), kThreads,
                                     kQuantSmem, 9);
  if (g1 < 1 || g2 < 1) return cudaErrorNotSupported;
  // QKV rows as a 2-D tensor [S][3*H*128] with the row pitch; 128 x 128 boxes, no swizzle.
  CUtensorMap map;
  if (!cuda::make_tensor_map_2d(
          &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, qkv, static_cast<uint64_t>(3 * n.heads * kD),
          static_cast<uint64_t>(n.seq), static_cast<uint64_t>(n.row_stride) * 2, kD, kTokenPad,
          CU_TENSOR_MAP_SWIZZLE_NONE))
    return cudaErrorNotSupported;
  const int64_t items = n.padded / kTokenPad * n.heads;
  ring_stats_kernel<<<static_cast<unsigned>(std::min<int64_t>(g1, items)), kThreads, kStatSmem,
                      stream>>>(map, n, qk_log2, buf);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  ring_finish_kernel<<<static_cast<unsigned>(n.heads), kD, 0, stream>>>(n, buf);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  ring_quantize_kernel<<<static_cast<unsigned>(std::min<int64_t>(g2, items)), kThreads, kQuantSmem,
                         stream>>>(map, n, buf);
  return cudaGetLastError();
}

}  // namespace h3rt::attention_sage::prepass
