// Sage attention kernel for sm_90a with warpgroup MMA (numerics: attention_sage.h).
//
// CTA = 192 query rows of one head, 3 consumer warpgroups (384 threads):
//   Loads: thread 0 issues TMA loads (128B-swizzled tiles) of the Q tile once and of the K and
//       V^T tiles of each 128-key block, kAhead blocks ahead, into a kStages-deep ring guarded
//       by mbarriers (full: transaction bytes; empty: one arrival per consumer warp). There is
//       no producer warp (12 warps leave 168 registers per thread, a 13th would lower that).
//   Consumer warpgroups, 64 query rows each, per KV block t:
//       S = Q8 K8^T    wgmma m64n128k32 s8*s8 -> s32, both operands from shared memory;
//       softmax in base 2 on the accumulator fragment (same per-thread rows/columns as the
//       mma.sync m16n8 fragment, so the Q/K scale groups of the contract are per thread),
//       ex2.approx straight to 448 p (log2(448) folded into the exponent);
//       P -> e4m3, packed in registers in the wgmma A-fragment order (the V token
//       permutation of the pre-pass makes the accumulator order match);
//       [Ob | lb] = P8 [V8 | 1]   wgmma m64n136k32 e4m3 RS (P from registers, V^T K-major from
//       shared memory, followed by 8 rows of e4m3 ones) into a fresh fp32 accumulator, then
//       O = O*alpha + Ob (two-level accumulation) and l = l*alpha + lb: the softmax
//       denominator is the row sum of P8 (RowSum::p8 of the contract), which costs the tensor
//       cores 6% more PV work instead of one add per score.
//   Each consumer runs phases p = 0..n: PV(p-1) with the O update and QK(p), then the softmax
//   of block p. The phases of the consumers take turns (round robin through named barriers), so
//   one consumer's softmax overlaps the others' matrix products.
// Measured at the seed shape on an H200 this (wgmma_pp3) beat every other schedule we tried:
// free-running consumers, two consumers of 64 rows with or without turns, the O update
// overlapped with the next QK product, and two CTAs of a cluster sharing each K/V load by TMA
// multicast (half the L2 reads, no fewer joules per block) (bench/RESULTS.md; all retired).
// Block-sparse form (kSparse): the CTA visits only the key blocks its list names (ascending),
// in list order; every visited block is computed exactly as in the dense kernel, so a full list
// gives the dense output bit for bit. CTAs whose rows all lie past S exit at once.
// Shared-memory tiles: rows of 128 bytes (Q/K: 128 channels; V^T: 128 tokens), 16-byte chunks
// XOR-swizzled by (row % 8) = TMA SWIZZLE_128B = the wgmma 128B-swizzle K-major layout.
// Padded keys (>= S) are masked; padded query rows are computed but not written.
// Output: bf16 rows and/or their NVFP4 encoding (a given global scale; a separate instantiation,
// nvfp4_detail::encode_head_quads on the accumulator fragments, bit-identical to bf16 followed by
// nvfp4_quantize).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <string>

#include "cuda/runtime.h"
#include "cuda/sm90_async.cuh"
#include "cuda/tensor_map.h"
#include "ops/attention_sage/attention_sage.h"
#include "ops/attention_sage/attention_sage_cuda.h"
#include "ops/attention_sage/sage_device.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define H3RT_SAGE_WGMMA_ENABLED 1
#endif

namespace h3rt::attention_sage {
namespace {

using namespace h3rt::cuda::sm90;  // NOLINT: the kernel reads as PTX steps

constexpr int kD = kHeadDim;
constexpr int kBN = kBlockN;
constexpr int kStages = 6;
constexpr int kTileBytes = 128 * 128;  // K and V^T tiles: 128 rows of 128 bytes
// A stage: the K tile, then the V^T tile and 8 more rows of e4m3 ones (written once): the PV
// product runs with N = 136 and its last 8 columns are the row sums of P8.
constexpr int kOnesBytes = 8 * 128;
constexpr int kStageBytes = 2 * kTileBytes + kOnesBytes;

// Shape of a CTA with C = 3 consumer warpgroups (64 query rows each): 168 registers per thread.
constexpr int C = 3;
struct Shape {
  static constexpr int kThreads = 128 * C;
  static constexpr int kBM = 64 * C;           // query rows per CTA
  static constexpr int kStageOff = kBM * 128;  // Q tile first; stage s: K, then V
  static constexpr int kBarOff = kStageOff + kStages * kStageBytes;
  static constexpr int kSmem = kBarOff + 8 * (1 + 2 * kStages) + 1024;  // + alignment slack
};
static_assert(kBN == 128 && kD == 128, "tiles assume 128-byte rows");

struct Args {
  const float* q_scale;
  const float* k_scale;
  const float* v_scale;
  __nv_bfloat16* out;  // null: NVFP4 output only
  int64_t out_stride;
  int seq, padded, heads;
  Nvfp4Out nvfp4;                      // optional NVFP4 encoding of the output (given g)
  attention_sparse::BlockList blocks;  // kSparse: the key blocks of each (head, query tile)
};

#ifdef H3RT_SAGE_WGMMA_ENABLED

constexpr int kAhead = kStages - 3;  // at phase t the loader issues block t + kAhead

#define H3RT_ACC64(C)                                                                           \
  C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]),     \
      C(d[10]), C(d[11]), C(d[12]), C(d[13]), C(d[14]), C(d[15]), C(d[16]), C(d[17]), C(d[18]), \
      C(d[19]), C(d[20]), C(d[21]), C(d[22]), C(d[23]), C(d[24]), C(d[25]), C(d[26]), C(d[27]), \
      C(d[28]), C(d[29]), C(d[30]), C(d[31]), C(d[32]), C(d[33]), C(d[34]), C(d[35]), C(d[36]), \
      C(d[37]), C(d[38]), C(d[39]), C(d[40]), C(d[41]), C(d[42]), C(d[43]), C(d[44]), C(d[45]), \
      C(d[46]), C(d[47]), C(d[48]), C(d[49]), C(d[50]), C(d[51]), C(d[52]), C(d[53]), C(d[54]), \
      C(d[55]), C(d[56]), C(d[57]), C(d[58]), C(d[59]), C(d[60]), C(d[61]), C(d[62]), C(d[63])
#define H3RT_REGS64                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "  \
  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "  \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define H3RT_RW_R(x) "+r"(x)
#define H3RT_RW_F(x) "+f"(x)

// d (+)= A B: m64n128k32 s8 x s8 -> s32, A and B from shared memory (K-major).
template <int kAccumulate>
__device__ __forceinline__ void wgmma_s8_ss(int (&d)[64], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 " H3RT_REGS64 ", %64, %65, p;\n}\n"
      : H3RT_ACC64(H3RT_RW_R)
      : "l"(da), "l"(db), "r"(kAccumulate));
}
#define H3RT_ACC68(C) H3RT_ACC64(C), C(d[64]), C(d[65]), C(d[66]), C(d[67])
#define H3RT_REGS68                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "  \
  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "  \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67}"
// d (+)= A B: m64n136k32 e4m3 x e4m3 -> f32 (V^T plus 8 rows of ones), A from registers.
template <int kAccumulate>
__device__ __forceinline__ void wgmma_e4m3_rs(float (&d)[68], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %73, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n136k32.f32.e4m3.e4m3 " H3RT_REGS68
      ", {%68, %69, %70, %71}, %72, p, 1, 1;\n}\n"
      : H3RT_ACC68(H3RT_RW_F)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(kAccumulate));
}

using device::ex2;
using device::pack_e4m3;

struct Smem {
  uint32_t q, stage0, bars;
  __device__ uint32_t k(int s) const { return stage0 + s * kStageBytes; }
  __device__ uint32_t v(int s) const { return k(s) + kTileBytes; }
  __device__ uint32_t q_full() const { return bars; }
  __device__ uint32_t full(int s) const { return bars + 8 * (1 + s); }
  __device__ uint32_t empty(int s) const { return bars + 8 * (1 + kStages + s); }
};

// The key blocks a CTA visits, by position t: all of them in order (dense), or its list.
template <bool kSparse>
struct KeyBlocks {
  const int32_t* list;  // kSparse: the CTA's ascending key-block indices
  __device__ int operator[](int t) const { return kSparse ? __ldg(list + t) : t; }
};

// TMA loads, issued by one thread (thread 0). The block at position t goes to stage
// t % kStages (use parity (t / kStages) & 1) once every consumer released the block that used
// the stage before (t - kStages).
struct Loader {
  const CUtensorMap* k;
  const CUtensorMap* v;
  int row0, v_row0;  // first K row of the head (h * Sp), first V^T row (h * 128)
  // Loads key block kb into stage s, whose previous use had parity `parity ^ 1`.
  __device__ void block(const Smem& sm, int s, uint32_t parity, int kb) const {
    bar_wait(sm.empty(s), parity ^ 1);
    bar_expect_tx(sm.full(s), 2 * kTileBytes);
    tma_load_2d(sm.k(s), k, sm.full(s), 0, row0 + kb * kBN);
    tma_load_2d(sm.v(s), v, sm.full(s), kb * kBN, v_row0);
  }
};

// Online-softmax state of one consumer thread (rows r0 = lane/4 and r0 + 8 of its warp's 16
// rows). l is kept as 448 * (sum of p): the kernel exponentiates straight to 448 p.
struct Softmax {
  float m[2], l[2], alpha[2];
};

// Scores of a block (int32 accumulator) -> P8 fragments (A operand of the PV wgmma).
// Thread rows: r0 = lane/4 holds elements i with (i/2)%2 == 0, r0 + 8 those with (i/2)%2 == 1.
// A thread's maximum is taken on the integers with 3-input max (VIMNMX3; exact, and dq > 0
// commutes with it); dq is per thread: q scale x this thread's K scale group (|a| <=
// 128*127*127 < 2^21). 448 p = exp2(a * dq - (m - log2(448))), computed as one FFMA on the
// integer's bits: B = bits(1.5 * 2^23) + a read as a float is exactly 1.5 * 2^23 + a, so
// x = B * dq - C with C = 1.5 * 2^23 * dq + m - log2(448) rounded up. C's rounding lowers x by
// less than 2 dq (one ulp of C), the same for all of the thread's keys of the row, and never
// lets p pass 448; dq is one quantization step of the scores, whose INT8 error is many steps.
// Against converting a exactly (an integer add and a float add before the FFMA): 3.1% faster
// at the seed shape, the error against fp64 unchanged (bench/RESULTS.md session 14).
// Masked keys (>= seq, last block) give p = 0.
// kTail: the block may reach past seq (the masking code); false: a block before the last, for
// which the masking is left out: the compiler did not always split the two forms itself (without
// the split the dense kernel ran 21% slower at the seed shape, bench/RESULTS.md session 11).
template <bool kTail>
__device__ __forceinline__ void softmax_block_as(const int (&acc)[64], float dq, int kv0, int seq,
                                                 int lane, Softmax& st, uint32_t (&pa)[4][4]) {
  constexpr float kLog2PScale = 8.807354922057604f;  // log2(448)
  const bool tail = kTail && kv0 + kBN > seq;
  auto masked = [&](int i) { return kv0 + (i / 4) * 8 + (lane % 4) * 2 + (i % 2) >= seq; };
  float rmax[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int x[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int i = 4 * (j / 2) + 2 * r + j % 2;
      x[j] = tail && masked(i) ? INT_MIN : acc[i];
    }
    int l1[11];
#pragma unroll
    for (int k = 0; k < 10; ++k) l1[k] = __vimax3_s32(x[3 * k], x[3 * k + 1], x[3 * k + 2]);
    l1[10] = max(x[30], x[31]);
    const int m0 = __vimax3_s32(l1[0], l1[1], l1[2]), m1 = __vimax3_s32(l1[3], l1[4], l1[5]);
    const int m2 = __vimax3_s32(l1[6], l1[7], l1[8]), m3 = max(l1[9], l1[10]);
    rmax[r] = static_cast<float>(max(__vimax3_s32(m0, m1, m2), m3));
  }
  float c[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // dq differs between the 4 threads of a row (K scale groups): reduce scaled maxima. A thread
    // whose keys are all masked holds INT_MIN * dq, below the row's real maximum (key kv0 of
    // the row is always valid and belongs to the thread with lane % 4 == 0).
    float sm = rmax[r] * dq;
    sm = fmaxf(sm, __shfl_xor_sync(0xffffffffu, sm, 1));
    sm = fmaxf(sm, __shfl_xor_sync(0xffffffffu, sm, 2));
    const float m_new = fmaxf(st.m[r], sm);
    st.alpha[r] = ex2(st.m[r] - m_new);
    st.m[r] = m_new;
    c[r] = -__fmaf_ru(12582912.0f, dq, m_new - kLog2PScale);  // -C
  }
  float f[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    const float b = __int_as_float(acc[i] + 0x4B400000);
    f[i] = ex2(tail && masked(i) ? -INFINITY : fmaf(b, dq, c[(i / 2) % 2]));
  }
  // k-step k2 covers n8 chunks 4k2..4k2+3: a0/a1 = chunks 4k2, 4k2+1 of rows r0/r0+8,
  // a2/a3 = chunks 4k2+2, 4k2+3.
#pragma unroll
  for (int k2 = 0; k2 < 4; ++k2) {
    const float* x = f + 16 * k2;
    pa[k2][0] = pack_e4m3(x[0], x[1], x[4], x[5]);
    pa[k2][1] = pack_e4m3(x[2], x[3], x[6], x[7]);
    pa[k2][2] = pack_e4m3(x[8], x[9], x[12], x[13]);
    pa[k2][3] = pack_e4m3(x[10], x[11], x[14], x[15]);
  }
}

// Issues [Ob | lb] = P8 [V8 | 1] of the block in stage s (4 k-steps of 32 keys) into a fresh
// accumulator.
__device__ __forceinline__ void pv_issue(const Smem& sm, int s, const uint32_t (&pa)[4][4],
                                         float (&ob)[68]) {
  const uint64_t dv = sw128_desc(sm.v(s));
  wg_fence();
  wgmma_e4m3_rs<0>(ob, pa[0], dv);
  wgmma_e4m3_rs<1>(ob, pa[1], dv + 2);
  wgmma_e4m3_rs<1>(ob, pa[2], dv + 4);
  wgmma_e4m3_rs<1>(ob, pa[3], dv + 6);
  wg_commit();
}

// After the PV wgmma of stage s completed: frees the stage, O = O*alpha + Ob and
// l = l*alpha + lb (ob[64] and ob[66]: the whole row sums of P8 of rows r0 and r0 + 8).
__device__ __forceinline__ void pv_finish(const Smem& sm, int s, int lane, Softmax& st,
                                          float (&ob)[68], float (&o)[64]) {
  reg_fence(ob);
  if (lane == 0) bar_arrive(sm.empty(s));
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = o[i] * st.alpha[(i / 2) % 2] + ob[i];
#pragma unroll
  for (int r = 0; r < 2; ++r) st.l[r] = st.l[r] * st.alpha[r] + ob[64 + 2 * r];
}

// Issues S = Q8 K8^T of a block (4 k-steps of 32 channels = 32 bytes) once its stage is full:
// dk = the stage's K descriptor, `full` its full barrier, waited with `parity`.
__device__ __forceinline__ void qk_issue(uint32_t full, uint32_t parity, uint64_t dk,
                                         uint64_t dq_desc, int (&acc)[64]) {
  bar_wait(full, parity);
  reg_fence(acc);
  wg_fence();
  wgmma_s8_ss<0>(acc, dq_desc, dk);
  wgmma_s8_ss<1>(acc, dq_desc + 2, dk + 2);
  wgmma_s8_ss<1>(acc, dq_desc + 4, dk + 4);
  wgmma_s8_ss<1>(acc, dq_desc + 6, dk + 6);
  wg_commit();
}

// Consumer c (0..C-1) of the CTA over the n key blocks of `kb` (positions t = 0..n-1).
// Phases: QK(0) | PV(t-1), QK(t) for t = 1..n-1 | PV(n-1); the softmax of block t follows the
// phase that issued QK(t). PV(t-1) completes and O is updated before QK(t) is issued.
template <bool kNvfp4, bool kSparse>
__device__ __forceinline__ void consumer(const Args& a, const Smem& sm, const Loader& ld, int c,
                                         int h, int q0, KeyBlocks<kSparse> kb, int n) {
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int64_t hq = static_cast<int64_t>(h) * (a.padded / kQWarpRows * 8);
  // Rows past the padded length (last CTA of a 192-row tiling) use a valid scale; not written.
  const int qblk = min((q0 + 64 * c) / kQWarpRows + warp, a.padded / kQWarpRows - 1);
  const float qs = a.q_scale[hq + qblk * 8 + lane / 4];
  const float* ksc = a.k_scale + static_cast<int64_t>(h) * (a.padded / kKBlock * 4) + lane % 4;
  const uint64_t dq_desc = sw128_desc(sm.q + c * 64 * 128);
  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  Softmax st{{-INFINITY, -INFINITY}, {0.0f, 0.0f}, {0.0f, 0.0f}};
  uint32_t pa[4][4];
  int acc[64];
  // Round robin: consumer c waits on barrier 1+c before a phase, then releases the next
  // consumer. The last consumer opens the first phase of consumer 0 and skips its final
  // release, so every barrier sees as many arrivals as waits.
  const int my_bar = 1 + c, other_bar = 1 + (c + 1) % C;
  if (c == C - 1) named_arrive(1, 256);
  bar_wait(sm.q_full(), 0);

  named_sync(my_bar, 256);
  qk_issue(sm.full(0), 0, sw128_desc(sm.k(0)), dq_desc, acc);
  named_arrive(other_bar, 256);
  int b = kb[0];
  wg_wait<0>();
  reg_fence(acc);
  softmax_block_as<true>(acc, qs * ksc[b * 4], b * kBN, a.seq, lane, st, pa);  // may be the tail
  // Ring counters kept incrementally (s_prev: stage of t - 1; s_t, ph_t: stage and use parity
  // of t) and QK(t)'s descriptors made before the turn. Against dividing by kStages and leaving
  // the descriptors to ptxas (which made them between the PV wait and the QK issue): 4 bytes of
  // spills instead of 28, the same output bytes, 1.5% faster at the seed shape, 1.5-4% at
  // 864x480 (H100, bench/RESULTS.md session 26).
  int s_prev = 0, s_t = 1 % kStages;
  uint32_t ph_t = 0;
  for (int t = 1; t < n; ++t) {
    b = kb[t];
    const float dq = qs * ksc[b * 4];  // loaded early: the wgmma fences below order memory
    // Sparse: the loader's next block index, a global load issued before the phase waits.
    int ahead = 0;
    if constexpr (kSparse) ahead = threadIdx.x == 0 && t + kAhead < n ? kb[t + kAhead] : 0;
    uint64_t dk = sw128_desc(sm.k(s_t)), da = dq_desc;
    uint32_t full = sm.full(s_t);
    asm volatile("" : "+l"(dk), "+l"(da), "+r"(full));  // pinned here, before the turn
    float ob[68];
    named_sync(my_bar, 256);
    pv_issue(sm, s_prev, pa, ob);
    wg_wait<0>();
    pv_finish(sm, s_prev, lane, st, ob, o);
    qk_issue(full, ph_t, dk, da, acc);
    named_arrive(my_bar == C ? 1 : my_bar + 1, 256);  // other_bar: kept live, it spilled
    // Behind this phase's matrix products: the stage of position t + kAhead last held t - 3,
    // which every consumer released in its phase t - 2.
    if (threadIdx.x == 0 && t + kAhead < n) {
      const int s_a = s_t >= kStages - kAhead ? s_t - (kStages - kAhead) : s_t + kAhead;
      const uint32_t ph_a = ph_t ^ (s_t >= kStages - kAhead ? 1u : 0u);
      ld.block(sm, s_a, ph_a, kSparse ? ahead : t + kAhead);
    }
    s_prev = s_t;
    if (++s_t == kStages) s_t = 0, ph_t ^= 1u;
    wg_wait<0>();
    reg_fence(acc);
    if (t == n - 1)  // only the last position can hold the tail block (lists ascend)
      softmax_block_as<true>(acc, dq, b * kBN, a.seq, lane, st, pa);
    else
      softmax_block_as<false>(acc, dq, b * kBN, a.seq, lane, st, pa);
  }
  {
    float ob[68];
    named_sync(my_bar, 256);
    pv_issue(sm, (n - 1) % kStages, pa, ob);
    if (c != C - 1) named_arrive(other_bar, 256);
    wg_wait<0>();
    pv_finish(sm, (n - 1) % kStages, lane, st, ob, o);
  }

  // Normalize: o * v_scale / l (l sums P8 = 448 p in e4m3, whole rows); bf16 pairs, written
  // and/or encoded to NVFP4 (the same roundings either way).
  const float inv[2] = {1.0f / st.l[0], 1.0f / st.l[1]};
  const float* vsc = a.v_scale + h * kD;
  const int row0 = q0 + 64 * c + warp * 16 + lane / 4;
  const auto word = [&](int j, int r) {
    const int d = j * 8 + (lane % 4) * 2;
    const __nv_bfloat162 v = __floats2bfloat162_rn(o[4 * j + 2 * r] * (vsc[d] * inv[r]),
                                                   o[4 * j + 2 * r + 1] * (vsc[d + 1] * inv[r]));
    return *reinterpret_cast<const uint32_t*>(&v);
  };
  device::write_head_output<kNvfp4>(a.out, a.out_stride, a.nvfp4, a.seq, a.heads, h, row0, lane,
                                    word);
}

template <bool kNvfp4, bool kSparse>
__global__ void __launch_bounds__(Shape::kThreads, 1)
    sage_wgmma_kernel(const __grid_constant__ CUtensorMap tm_q,
                      const __grid_constant__ CUtensorMap tm_k,
                      const __grid_constant__ CUtensorMap tm_v, Args a) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;
  const Smem sm{base, base + Shape::kStageOff, base + Shape::kBarOff};
  // Broadcast so the compiler sees a warp-uniform warpgroup index (keeps wgmma unserialized).
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  const int h = blockIdx.y, q0 = blockIdx.x * Shape::kBM;
  int n = (a.seq + kBN - 1) / kBN;
  KeyBlocks<kSparse> kb{nullptr};
  if constexpr (kSparse) {
    // A CTA leaving early still writes its share of the NVFP4 scale padding (zeroed by a
    // grid-stride loop over every CTA's threads).
    const auto leave = [&] {
      if constexpr (kNvfp4)
        nvfp4_detail::fused_scale_padding(a.nvfp4, a.seq, static_cast<int64_t>(a.heads) * kD);
    };
    if (q0 >= a.seq) return leave();  // the whole CTA: no rows to write, no barrier touched yet
    const int64_t tile = static_cast<int64_t>(h) * a.blocks.n_qtiles + blockIdx.x;
    kb.list = a.blocks.index + tile * a.blocks.n_kblocks;
    n = __ldg(a.blocks.count + tile);
    if (n <= 0) return leave();  // an empty list (not made by the router): rows left unwritten
  }
  if (threadIdx.x == 0) {
    bar_init(sm.q_full(), 1);
    for (int s = 0; s < kStages; ++s) {
      bar_init(sm.full(s), 1);
      bar_init(sm.empty(s), 4 * C);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  {
    // The ones rows of every stage (any swizzle maps them onto themselves: all bytes equal),
    // made visible to the tensor cores' async proxy.
    for (int i = threadIdx.x; i < kStages * kOnesBytes / 4; i += blockDim.x) {
      const uint32_t addr = sm.v(i / (kOnesBytes / 4)) + kTileBytes + 4 * (i % (kOnesBytes / 4));
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(0x38383838u));  // e4m3 1.0
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();
  const Loader ld{&tm_k, &tm_v, h * a.padded, h * kD};
  if (threadIdx.x == 0) {
    bar_expect_tx(sm.q_full(), Shape::kBM * 128);
    tma_load_2d(sm.q, &tm_q, sm.q_full(), 0, h * a.padded + q0);
    for (int t = 0; t <= kAhead && t < n; ++t) ld.block(sm, t, 0, kb[t]);  // kAhead < kStages
  }
  consumer<kNvfp4, kSparse>(a, sm, ld, wg, h, q0, kb, n);
}

#else  // not sm_90a: an empty body keeps the symbol.

template <bool kNvfp4, bool kSparse>
__global__ void sage_wgmma_kernel(const __grid_constant__ CUtensorMap,
                                  const __grid_constant__ CUtensorMap,
                                  const __grid_constant__ CUtensorMap, Args) {}

#endif

// 2-D byte tensor [rows][cols] (row pitch `cols` bytes), boxes of 128 bytes x box_rows rows,
// 128B swizzle; rows past the end read as zeros.
bool make_map(CUtensorMap* map, const void* base, uint64_t cols, uint64_t rows,
              uint32_t box_rows = 128) {
  return cuda::make_tensor_map_2d(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, base, cols, rows, cols, 128,
                                  box_rows, CU_TENSOR_MAP_SWIZZLE_128B);
}

cudaError_t launch(const SageAttentionParams& p, cudaStream_t stream) {
  using Sh = Shape;
  const uint64_t sp = static_cast<uint64_t>(padded_len(p.seq));
  const uint64_t heads = static_cast<uint64_t>(p.heads);
  CUtensorMap maps[3];
  if (!make_map(&maps[0], p.buf.q8, kD, heads * sp, Sh::kBM) ||
      !make_map(&maps[1], p.buf.k8, kD, heads * sp) ||
      !make_map(&maps[2], p.buf.v8t, sp, heads * kD))
    return cudaErrorInvalidValue;
  const Args a{p.buf.q_scale,
               p.buf.k_scale,
               p.buf.v_scale,
               static_cast<__nv_bfloat16*>(p.out),
               p.out_row_stride,
               static_cast<int>(p.seq),
               static_cast<int>(sp),
               static_cast<int>(p.heads),
               p.nvfp4,
               p.blocks};
  // The NVFP4 epilogue is its own instantiation: kept out of the plain kernel, whose main loop
  // it would otherwise crowd (more spills measured with ptxas -v); so is the sparse form, which
  // leaves the dense kernel's code as it was.
  const bool sparse = p.blocks.enabled();
  auto kernel = p.nvfp4.enabled()
                    ? (sparse ? sage_wgmma_kernel<true, true> : sage_wgmma_kernel<true, false>)
                    : (sparse ? sage_wgmma_kernel<false, true> : sage_wgmma_kernel<false, false>);
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Sh::kSmem);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((sp + Sh::kBM - 1) / Sh::kBM),
                  static_cast<unsigned>(p.heads));
  kernel<<<grid, Sh::kThreads, Sh::kSmem, stream>>>(maps[0], maps[1], maps[2], a);
  return cudaGetLastError();
}

}  // namespace

namespace detail {

cudaError_t sage_attention_wgmma(const SageAttentionParams& p, cudaStream_t stream) {
  if (!cuda::compiled_arch_listed("90a")) return cudaErrorNotSupported;
  return launch(p, stream);
}

}  // namespace detail
}  // namespace h3rt::attention_sage
