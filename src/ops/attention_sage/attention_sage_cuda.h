// CUDA launchers of the Sage attention op (numerics: see attention_sage.h).
//
//   sage_prepass:   two algorithms (SagePrepassAlgo), bit-identical outputs.
//                   two_launch: (1) per (128-token chunk, head): Q -> int8 with its scales,
//                   fixed-order partial K sums and V channel maxima; the last chunk of each head
//                   (atomic ticket) reduces the partials in order into k_mean and v_scale.
//                   (2) per (chunk, head): K - mean -> int8 with scales, V -> e4m3 transposed.
//                   fused_l2 (the default where it fits): one persistent launch doing the same work
//                   items, ordered so that (2) of a head re-reads its K and V from L2 instead of
//                   HBM (prepass_fused.cu). Needs ~91 KB of shared memory per block (~155 KB for
//                   its two-stage form).
//                   Reads Q/K/V through the QKV row stride; no copies; tail rows masked.
//   sage_attention: writes bf16 token-major output with a row stride and/or its NVFP4 encoding
//                   (the out_proj input, given global scale only): bit-identical to the bf16
//                   output followed by nvfp4_quantize (kIeee), the bf16 need not be written.
//                   Kernels:
//                   w4         sm_90a / sm_120a / sm_121a (attention_sm90.cu): mma.sync int8 QK,
//                              fp8 e4m3 PV, cp.async double buffering, 64 query rows per CTA.
//                   wgmma_pp3  sm_90a only (attention_wgmma_sm90.cu): wgmma int8 QK / fp8 PV,
//                              TMA loads (issued by one thread) into a 6-stage mbarrier ring,
//                              3 warpgroups of 64 query rows each taking turns (192 rows).
//                   Either runs block-sparse with a block list (SageAttentionParams::blocks).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "formats/nvfp4_quantize_fused.h"
#include "ops/attention_sparse/router.h"

namespace h3rt::attention_sage {

// Device buffers for one (S, H): carved from one allocation by sage_buffers(). The allocation
// must be zero-filled once after it is made (the per-head tickets reset themselves).
struct SageBuffers {
  int8_t* q8 = nullptr;             // [H][Sp][128]
  int8_t* k8 = nullptr;             // [H][Sp][128]
  uint8_t* v8t = nullptr;           // [H][128][Sp]
  float* q_scale = nullptr;         // [H][Sp/16*8]
  float* k_scale = nullptr;         // [H][Sp/128*4]
  float* v_scale = nullptr;         // [H][128]
  float* k_mean = nullptr;          // [H][128]
  float* k_partial = nullptr;       // [Sp/128][H][128] workspace (fused_l2: [H][Sp/128][128])
  float* v_partial = nullptr;       // [Sp/128][H][128] workspace (two_launch only)
  unsigned* tickets = nullptr;      // [H + 3 + H*128] workspace: per-head tickets, work and exit
                                    // counters, per-head V maxima (fused_l2; kept zero between
                                    // calls), then the fused kernel's call counter (its epoch)
  uint64_t* head_consts = nullptr;  // [H][256] fused_l2 workspace: k_mean | v_scale bits in the
                                    // low word, the epoch that wrote them in the high word
};

size_t sage_buffer_bytes(int64_t seq, int64_t heads);
SageBuffers sage_buffers(void* base, int64_t seq, int64_t heads);

// automatic: fused_l2 where it can run, else two_launch. On the H200 at the seed shape (S=37,810,
// H=56) fused_l2 takes 0.91 ms and two_launch 1.24 ms (bench/RESULTS.md, session 6).
enum class SagePrepassAlgo { automatic, two_launch, fused_l2 };
const char* sage_prepass_algo_name(SagePrepassAlgo a);

struct SagePrepassParams {
  const void* qkv = nullptr;  // bf16 [S][row_stride]: q | k | v, each H*128
  int64_t row_stride = 0;     // elements
  int64_t seq = 0, heads = 0;
  float sm_scale = 0.0f;  // softmax scale (usually 1/sqrt(128))
  SageBuffers buf;
  SagePrepassAlgo algo = SagePrepassAlgo::automatic;
};
// Returns cudaErrorInvalidValue for bad arguments; with algo == fused_l2, cudaErrorNotSupported
// where the fused kernel cannot run (see above); automatic then runs two_launch.
cudaError_t sage_prepass(const SagePrepassParams& p, cudaStream_t stream);

// Kernel variants. automatic: wgmma_pp3 on sm_90 (the fastest measured), w4 elsewhere (and on
// sm_90 with a binary lacking sm_90a code). Both use RowSum::p8 (attention_sage.h). Other schedules
// (w8, two-consumer and free-running wgmma) measured slower at the seed shape and were retired
// (bench/RESULTS.md).
enum class SageVariant { automatic, w4, wgmma_pp3 };
const char* sage_variant_name(SageVariant v);
// The variant `automatic` runs on the current device with this binary (w4 or wgmma_pp3; others
// unchanged), and the query rows one CTA of a variant computes (its query tile: the router must
// pool over the same tiles). Throws nothing; a device query failure gives w4.
SageVariant sage_resolve_variant(SageVariant v);
int64_t sage_query_tile(SageVariant v);  // v resolved: 192 (wgmma_pp3) or 64 (w4)

struct SageAttentionParams {
  SageBuffers buf;  // filled by sage_prepass
  int64_t seq = 0, heads = 0;
  void* out = nullptr;         // bf16 [S][out_row_stride], head h at column h*128; null: none
  int64_t out_row_stride = 0;  // elements, >= H*128
  SageVariant variant = SageVariant::automatic;
  // Optional NVFP4 output of [S, H*128] (formats/nvfp4_quantize_fused.h), kGiven g only: qdata
  // 8-byte aligned. At least one of out and nvfp4 must be set.
  Nvfp4Out nvfp4;
  // Optional block-sparse form (device pointers, attention_sparse/router.h): q_tile must be
  // sage_query_tile(variant), n_qtiles = ceil(S / q_tile), n_kblocks = ceil(S / 128); every
  // count >= 1 (the router guarantees it; the rows of a tile with count 0 are not written).
  // Unset: dense.
  attention_sparse::BlockList blocks;
};
// Whether the Sage kernels run on a device of compute capability cc (major * 10 + minor) with this
// binary: sm_90, sm_120 or sm_121, and the arch list names it (plain or "a").
bool sage_runs_on(int cc);
// Returns cudaErrorInvalidValue for bad arguments (a computed NVFP4 global scale included),
// cudaErrorNotSupported when the device is not sm_90 / sm_120 / sm_121 (wgmma*: sm_90) or the
// binary lacks that arch (sage_runs_on).
cudaError_t sage_attention(const SageAttentionParams& p, cudaStream_t stream);

namespace detail {
// The wgmma kernels (attention_wgmma_sm90.cu); arguments already checked by sage_attention.
cudaError_t sage_attention_wgmma(const SageAttentionParams& p, cudaStream_t stream);
}  // namespace detail

}  // namespace h3rt::attention_sage
