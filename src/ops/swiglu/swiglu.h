// swiglu: out = silu(gate) * value, where each input row [2F] is [gate (F) | value (F)], the
// original MiniMax fc1 order (diffusers stores the halves swapped; the loader reads the
// original checkpoint, so no swap happens here). silu(g) = g / (1 + exp(-g)).
// bf16 mode rounds silu(gate) and the product to bf16, as two bf16 tensor ops do.
#pragma once

#include <cstdint>

namespace h3rt::ops {

struct SwigluParams {
  const float* in = nullptr;  // [rows, in_row_stride (0: 2*ffn)]
  float* out = nullptr;       // [rows, ffn] contiguous
  int64_t rows = 0, ffn = 0, in_row_stride = 0;
  bool bf16 = false;
};

void swiglu_cpu(const SwigluParams& p);

// silu in float32 (shared by the AdaLN input path).
float silu(float x);

}  // namespace h3rt::ops

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "formats/nvfp4_quantize_fused.h"
#include "ops/int8_linear/int8_fused.h"
#include "ops/linear/e4m3_out.h"
#include "ops/swiglu/silu_table.h"

namespace h3rt::ops {

// GPU version (cuda.cu): bf16 in/out, float32 math, bf16 rounding points of swiglu_cpu(bf16).
// exact_exp = true evaluates exp in double (bit-exact with the CPU reference, costs fp64 issue
// slots); false uses the device expf (one bf16 ulp apart in rare elements). ffn and row strides
// multiples of 8, pointers 16-byte aligned. Device pointers.
//
// NVFP4 output (`nvfp4`, src/formats/nvfp4_quantize_fused.h): the fc2 input is encoded to NVFP4
// in registers, bit-identical to writing out in bf16 and running nvfp4_quantize (kIeee) on it;
// out may then be null (no bf16 intermediate) or set (both written). ffn % 16 == 0. Lanes
// 2i/2i+1 hold the two halves of a 16-element block (chunks c0 + threadIdx.x, c0 a multiple of
// the block size), one shuffle gives the block amax. Given g: one launch. Computed g: pass 1
// computes out and reduces amax|out| only (its last CTA stores g); pass 2 recomputes and
// encodes: the fc1 output is read twice, out is never stored.
//
// Table path (silu_table set, no NVFP4 output or one with a given g; elsewhere the kernel above
// runs): round_bf16(silu(g)) is looked up by the 16 bits of g in a 65,536-entry table held in
// shared memory, so an element costs a load, a multiply and a rounding instead of exp and a
// division. Where the whole table (128 KB) does not fit a CTA's shared memory (sm_120 / sm_121),
// its compact form (silu_table.h: 8 KB and three exact rules) is loaded instead. The table comes
// from swiglu_silu_table_cuda, which evaluates every entry by the exact path, so the table path is
// bit-exact with swiglu_cpu as exact_exp is (tested on all 65,536 gates, in both forms), whatever
// exact_exp says. H3RT_SWIGLU_TABLE=compact forces the compact form (for tests and timings).
//
// e4m3 output (`e4m3`, ops/linear/e4m3_out.h): the fc2 input of an fp8 layer with a static input
// scale, bit-identical to writing out in bf16 and running quantize_e4m3_cuda on it, in the row and
// the table kernels alike; out may then be null or set.
//
// int8 convrot output (`int8`, ops/int8_linear/int8_fused.h): the fc2 input rotated and quantized
// per row in the same launch, bit-identical to writing out in bf16 and running
// int8_quantize_rows_cuda on it (either rotation form); out may then be null or set. Table path
// only (silu_table required): persistent CTAs of up to 512 threads, one per SM, the table (whole
// or compact), the staged row and the warps' transpose tiles in shared memory (about 227 KB at
// ffn 14336, G 256, with the whole table), the next row's loads in flight while a row is
// rotated. Where swiglu_int8_fusable(ffn, group) is false (a group other than 16/64/256 or not
// dividing ffn, ffn > 16384, fewer than 4 warps' tiles fitting beside the compact table) the
// caller writes bf16 and quantizes separately.
// (Session 10's fused form with the exact silu instead of the table, 512 threads and two CTAs per
// SM, measured 5% slower than table swiglu + the standalone quantizer; session 23's CTAs of 7
// warps, three per SM, beside the compact table, measured no faster than this one:
// bench/RESULTS.md.)
struct SwigluCudaParams {
  const __nv_bfloat16* in = nullptr;  // [rows, in_row_stride (0: 2*ffn)], [gate | value]
  __nv_bfloat16* out = nullptr;       // [rows, out_row_stride (0: ffn)]; may be null with nvfp4
  int64_t rows = 0, ffn = 0, in_row_stride = 0, out_row_stride = 0;
  bool exact_exp = true;
  Nvfp4Out nvfp4;  // optional NVFP4 output of out ([rows, ffn]); disabled by default
  E4m3Out e4m3;    // optional e4m3 output of out (static scale; ops/linear/e4m3_out.h); off
  const __nv_bfloat16* silu_table = nullptr;  // optional [kSiluTableEntries], see above
  Int8Out int8;    // optional int8 convrot output of out (table path only, see above); off
};

cudaError_t swiglu_cuda(const SwigluCudaParams& p, cudaStream_t stream);

// Whether swiglu_cuda takes an int8 output for rows of `ffn` with rotation group `group` on the
// current device.
bool swiglu_int8_fusable(int64_t ffn, int group);

// Fills table[i] = round_bf16(silu(g)) for the bf16 g whose bits are i, as swiglu_cpu rounds it.
cudaError_t swiglu_silu_table_cuda(__nv_bfloat16* table, cudaStream_t stream);

}  // namespace h3rt::ops
#endif  // H3RT_HAVE_CUDA
