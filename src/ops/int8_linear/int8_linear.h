// int8_linear: the GPU side of int8 W8A8 linears (ComfyUI int8_tensorwise / int8_convrot),
// bit-exact with the host reference of include/h3rt/int8.h: a rotate+quantize kernel for the
// activation rows and an int8 x int8 -> int32 GEMM with the two-scale epilogue.
//
// ---- int8_quantize_rows_cuda ----------------------------------------------------------------
// Per row r of x [rows, k] bf16 (row stride x_row_stride): when group G > 0, each group of G
// columns is rotated by H = (Kronecker power of H4) / sqrt(G); then
//   s = max(amax / 127, 1e-30) (f32), q = clamp(rne(bf16(v / bf16(s))), -128, 127) (int8).
// Exactness. The host rotates with radix-4 butterflies in double (one rounding per add, in a fixed
// order), multiplies by 2^-log2(sqrt G), rounds to f32 and then to bf16. Double butterflies are not
// exact for every bf16 input (exponents spanning > ~37 binades in one group lose bits), so instead
// of an exact-sum scheme that could disagree with the host there, the kernel performs THE SAME
// IEEE double operations in the same order (each output of a butterfly is
// ((a0 + a1) + a2) - a3 and so on, as the host writes it; a1 - a0 is computed as -(a0 - a1),
// which can differ only in the sign of a zero, and the sign of a zero rotated value never reaches
// q or s: amax takes |v| and q(+-0) = 0). Identical operations on identical doubles give identical
// bits for every finite input, so the rotation matches the host unconditionally.
//   bf16 -> double costs no conversion instruction: the 15 magnitude bits are placed at the
//   bottom of the double's exponent field, which is the value times 2^-896 exactly (bf16
//   subnormals become double subnormals). In that scaled domain every operation rounds as the
//   host's does: all values are multiples of 2^-1029, so a result that is subnormal there
//   (|unscaled| < 2^-126) needs at most 7 bits and is exact in both domains, and normal results
//   round identically. The final multiply by 2^(896 - log2 sqrt G) is exact.
//   double -> f32 is cvt.rn (as static_cast), f32 -> bf16 the host's bit rule.
// The quotient: v / bf16(s) is computed as v * rcp_rn(bf16(s)) (relative error < 2^-22). Both
// operands have 8-bit significands, so the exact quotient a/b * 2^e is either an at-most-8-bit
// number or at least 2^-17 (relative) away from every bf16 rounding midpoint (9-bit numbers):
// any approximation within 2^-18 rounds to the same bf16 as the host's f32 quotient does, and
// quotients below 0.25 give q = 0 either way. amax is order independent.
// Non-finite inputs (and rotations that overflow f32) are undefined, as in the host reference.
// Paths (Int8QuantizePath). Rows with k % 16 == 0, k <= 16384, 16-byte aligned x and q rows
// (x_row_stride % 8, q_row_stride % 16) and G in {0, 4, 16, 64, 256} can run either register
// kernel; kAuto takes the team kernel where the device has it (compute capability >= 9.0, TMA),
// else the block kernel. The H3 widths (5376, 7168, 14336) and the tiny model's (192, 256, 384,
// G = 16 or 64) all qualify. Anything else (any k multiple of a valid G up to 28,000 columns,
// any stride or alignment) runs a simple shared-memory kernel that performs the host's loop
// literally in double.
//  - kTeam. The block kernel kept one row in flight per CTA behind two block barriers per row;
//    here many rows are in flight per SM and a row that fits one warp needs no block barrier. A
//    CTA is a team of W warps (W = ceil(units / per), per in {4, 3, 2, 1} 512-column units per
//    warp, chosen per (device, G, k): up to 20 resident warps per SM, then the most bytes in
//    flight; by the occupancy calculator 3 units per warp for the H3 widths on an H200, 20
//    warps per SM and ~65 KB of row data in flight) that owns one row at a time, persistent. Warp w
//    owns the units [w U / W, (w + 1) U / W) of each row (U = ceil(k / 512), the last one possibly
//    partial). Loads: TMA bulk copies (cp.async.bulk, one per 256 columns, issued by as many lanes)
//    into two per-warp stages, completion on an mbarrier per stage; the next row's copies are
//    issued before the current row is waited for, so a row per warp is always in flight and no
//    registers hold loads. Per unit each lane takes its 16 columns from the stage and rotates
//    them with the block kernel's operations (same butterflies, stages 1 and 4 in registers, the
//    transpose for G >= 64 now moves whole doubles through a per-warp tile at an odd pitch of 17
//    doubles), then writes the bf16 results back over the stage in column order (G = 256: a u16
//    scatter, conflict-free through the 32-byte pad after each 256 columns). amax: a warp
//    shuffle, then for W > 1 one __syncthreads per row over a double-buffered slot per warp.
//    The quantize pass reads the stage back (16 bytes per lane), 16-byte stores of q.
//    Rotation form (Int8RotateMath, params.rotate): the team kernel (and the fused producers)
//    rotate either with the double butterflies above or with exact integer butterflies on the
//    bf16 values as integers (rotate_quantize.cuh: same q and scale bytes; int32 where a warp's
//    512 columns allow, else int64 (on GPUs with slow FP64 only), and where a group's exponents
//    span too far (or int64 is absent) that warp's 512 columns take the double form). kAuto:
//    integer on sm_120 / sm_121 (FP64 at 1/64 of FP32) and Hopper (measured faster there),
//    double elsewhere. The block and shared-memory
//    kernels always rotate in double.
//    New exact steps (none change a value): the bf16 -> double placement uses an arithmetic
//    shift ((int)w >> 3 & 0x8fffe000 gives the same bits as the masks); bf16 rounding of the
//    rotated f32 and of the quotient is cvt.rn.bf16x2.f32 (IEEE nearest-even to bf16 = the
//    host's bit rule for every non-NaN f32, subnormals included); amax is taken over |f32|
//    before rounding (bf16(max |f|) = max |bf16(f)|: the rounding is monotone and odd); the
//    clamp is max/min.bf16x2 against the exact values -128 and 127 BEFORE rounding to an
//    integer (clamp(rne(y)) = rne(clamp(y)) for integer bounds), and rne(yc) is the low byte of
//    the bits of yc + 1.5 * 2^23 (an f32 add in [2^23, 2^24), spacing 1, an even offset), so no
//    FRND / F2I conversion remains. (A one-off host emulation of this quotient path, every finite
//    bf16 v against 4,645 bf16 scales, gave the host rule's q everywhere.)
//  - kBlock. Persistent CTAs of ceil(k / 16 / 32) warps, one row at a time (the next row's
//    loads in flight), each thread owning 16 consecutive columns; the butterfly stages of stride
//    1 and 4 run in registers, those of stride 16 and 64 after a transpose of the doubles
//    through a per-warp shared tile (two 32-bit passes, conflict-free padding for G = 256), then
//    the bf16 results go back to column order through the same tile, the CTA reduces amax, and
//    each thread stores 16 int8 bytes.
//
// ---- int8_linear_cuda -----------------------------------------------------------------------
// y[rows, out] = bf16(float(x_q . w_q^T) * (x_scale[row] * w_scale[col])), then bf16(y + bias):
// the scale product first (one f32 multiply), then the converted accumulator (int32 -> f32 rne)
// times it, rounded to bf16; with a bias one f32 add of the bf16 bias and a second rounding.
// Every step is a single f32 operation with nothing to contract into an FMA (the rounding to bf16
// separates the multiply from the add). The int32 accumulator is exact: |acc| <= 128^2 * in < 2^31
// for in < 131072.
// Layout: x [rows, in] int8 row-major (row stride x_row_stride, 0: in), w [out, in] contiguous
// (the "TN" GEMM, both K-major), y [rows, out] bf16 (row stride y_row_stride, 0: out).
// Paths (Int8GemmPath; kAuto, or the environment variable H3RT_INT8_GEMM, picks):
//  - kCutlassSm90 (compute capability 9.0, built with H3RT_HAVE_CUTLASS and sm_90a): CUTLASS 4.2
//    warp-specialized TMA/wgmma int8 GEMMs whose EVT epilogue computes exactly the rule above
//    (scales broadcast per row and column, bias per column; without bias the bias node adds
//    -0.0, which leaves every value's bits unchanged). Int8CutlassConfig picks the kernel and the
//    persistent scheduler's raster order / swizzle (kAuto: the per-shape table in
//    int8_linear.cu, kCutlassAutoTable):
//      256x128[_nS]   cooperative 256x128x128, cluster 2x1 (the original kernel)
//      128x256[_nS]   cooperative 128x256x128, cluster 2x1 (one m64n256 wgmma per warp group)
//    without suffix CUTLASS's default schedule (heuristic raster, no swizzle); _nS rasterizes
//    along N with swizzle S (S clusters along M side by side: L2 reuse of x and w tiles).
//    All need in % 16 == 0, x_row_stride % 16 == 0, y_row_stride % 8 == 0, 16-byte aligned x,
//    w, y. No workspace.
//  - kCutlassSm80 (built with H3RT_HAVE_CUTLASS; any sm_80+ device the binary has code for):
//    CUTLASS 4.2's 2.x-API mma.sync int8 GEMM (cp.async multistage, 128x256x64 tiles) with the
//    same rule in an Sm80 EVT epilogue (gemm_cutlass_sm80.cu): no int32 staging. kAuto's
//    path on compute capability 12.x (GB10: no wgmma, and at 273 GB/s the staging of the
//    cuBLASLt path costs about +58% by the byte count); its sm_90a build passed every GEMM test
//    bit-exactly on an H100 (2026-12-05); it has never run on a 12.x GPU. Needs in % 16,
//    x_row_stride % 16, out % 8, y_row_stride % 8 and 16-byte aligned x, w, y, w_scale, bias.
//  - kCublasLt (any GPU): cuBLASLt int8 IMMA, CUBLAS_COMPUTE_32I with int32 output (cuBLASLt's
//    int8 -> int8/f32-scaled variants round differently from the two-scale rule, so they are not
//    used) into the workspace, `rows` in chunks of at most kInt8ChunkBytes of int32, each chunk
//    followed by an exact epilogue kernel (int32 -> bf16, scales, bias). Where cuBLASLt offers no
//    algorithm (its IMMA kernels want 4-aligned dimensions and strides), a plain dp4a kernel
//    computes the same int32 accumulators: integer sums are exact in any order.
// H3RT_INT8_GEMM=cutlass (CUTLASS sm90, config from the table) | cutlass_<config> (e.g.
// cutlass_128x256_n4) | cutlass_sm80 | cublaslt; it applies only where params.path is kAuto.
// kAuto: CUTLASS sm90 on compute capability 9.0 when compiled in and the shape qualifies (the
// table's config; where CUTLASS refuses the arguments at run time, cuBLASLt); CUTLASS mma.sync
// on compute capability 12.x where compiled in and the operands qualify; otherwise cuBLASLt. An
// explicitly requested path or config that cannot run returns cudaErrorNotSupported (never a
// different computation). Blackwell code (sm_100a/120a/121a) is compiled in CI but has never run
// (no Blackwell GPU is available to the project); sm_100 takes the cuBLASLt path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "ops/int8_linear/int8_fused.h"

namespace h3rt::ops {

// Which quantizer kernel runs (see "Paths" above). kAuto: the team kernel where it fits, else the
// block register kernel where that fits, else the shared-memory one; the environment variable
// H3RT_INT8_QUANT=team|block|generic overrides kAuto where that kernel can take the call (else
// kAuto's choice runs); a kernel forced through `path` that cannot take it fails instead.
enum class Int8QuantizePath : uint8_t { kAuto, kTeam, kBlock, kGeneric };

// Rotate (group > 0: 4, 16, 64 or 256; 0 = plain per-row int8) and quantize each bf16 row:
// q int8 [rows, k] (row stride q_row_stride, 0 = k), scale f32 [rows]. Bit-exact with
// h3rt::int8_quantize_rows (include/h3rt/int8.h).
struct Int8QuantizeCudaParams {
  const __nv_bfloat16* x = nullptr;
  int64_t x_row_stride = 0;  // 0: k
  int8_t* q = nullptr;
  int64_t q_row_stride = 0;
  float* scale = nullptr;
  int64_t rows = 0, k = 0;
  int group = 0;
  bool force_generic = false;  // tests: run the shared-memory kernel even where the fast one fits
  Int8QuantizePath path = Int8QuantizePath::kAuto;  // tests and benchmarks force a kernel
  // The team kernel's rotation form (int8_fused.h; the block and shared-memory kernels always
  // rotate in double): kAuto = the compiled arch's default.
  Int8RotateMath rotate = Int8RotateMath::kAuto;
  uint32_t* rotate_tiers = nullptr;  // tests: uint32[2] += units the integer form rotated in
                                     // double ([0]) and in int64 ([1]) (rotate_quantize.cuh)
};
// cudaErrorNotSupported when `path` (or force_generic) names a kernel that cannot take p.
cudaError_t int8_quantize_rows_cuda(const Int8QuantizeCudaParams& p, cudaStream_t stream);
// The kernel int8_quantize_rows_cuda runs for p on the current device (kAuto resolved, the
// environment honoured); kAuto when p forces a path that cannot take it.
Int8QuantizePath int8_quantize_resolve_path(const Int8QuantizeCudaParams& p);
// The form kAuto takes in the team kernel (and the fused producers) on the current device:
// kInteger or kDouble, from the arch of the code the device runs.
Int8RotateMath int8_rotate_auto_math();
// Whether the integer form has its int64 tier on the current device (GPUs with slow FP64).
bool int8_rotate_int64_tier();
const char* int8_quantize_path_name(Int8QuantizePath path);

enum class Int8GemmPath : uint8_t { kAuto, kCutlassSm90, kCublasLt, kCutlassSm80 };

// The CUTLASS kernel and schedule of kCutlassSm90 (see the header comment); names as
// int8_cutlass_config_name gives them (H3RT_INT8_GEMM=cutlass_<name>).
enum class Int8CutlassConfig : uint8_t {
  kAuto,
  k256x128,
  k256x128_n2,
  k256x128_n4,
  k128x256,
  k128x256_n2,
  k128x256_n4,
};
// Every config but kAuto, in the order above (benchmark columns, tests).
inline constexpr Int8CutlassConfig kInt8CutlassConfigs[] = {
    Int8CutlassConfig::k256x128, Int8CutlassConfig::k256x128_n2, Int8CutlassConfig::k256x128_n4,
    Int8CutlassConfig::k128x256, Int8CutlassConfig::k128x256_n2, Int8CutlassConfig::k128x256_n4,
};

// The int32 staging of the cuBLASLt path is at most this many bytes per chunk of rows.
inline constexpr size_t kInt8ChunkBytes = size_t(256) << 20;

// y[rows, out] = bf16(float(x_q . w_q^T) * (x_scale[row] * w_scale[col])) then bf16(+ bias):
// bit-exact with h3rt::int8_linear. w_scale has `out` entries (a scalar weight scale is
// expanded by the caller). workspace: int8_linear_workspace_bytes(rows, out) device bytes (may
// be 0 for paths that need none).
struct Int8LinearCudaParams {
  const int8_t* x = nullptr;
  int64_t x_row_stride = 0;             // [rows, in], 0: in
  const float* x_scale = nullptr;       // [rows]
  const int8_t* w = nullptr;            // [out, in] contiguous
  const float* w_scale = nullptr;       // [out]
  const __nv_bfloat16* bias = nullptr;  // [out] or null
  __nv_bfloat16* y = nullptr;
  int64_t y_row_stride = 0;  // [rows, out], 0: out
  int64_t rows = 0, in = 0, out = 0;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  Int8GemmPath path = Int8GemmPath::kAuto;  // kAuto honours H3RT_INT8_GEMM
  // With path kCutlassSm90 (or kAuto resolving to it): kAuto = the per-shape table (or the
  // config H3RT_INT8_GEMM names when path is kAuto).
  Int8CutlassConfig cutlass_config = Int8CutlassConfig::kAuto;
};
// The cuBLASLt path's int32 staging: min(rows, chunk) x out x 4 bytes (chunk rows: a multiple of
// 128 with chunk x out x 4 <= kInt8ChunkBytes). Enough for every path.
size_t int8_linear_workspace_bytes(int64_t rows, int64_t out);
cudaError_t int8_linear_cuda(const Int8LinearCudaParams& p, cudaStream_t stream);

// The path kAuto (with the environment) resolves to for `p` on the current device.
Int8GemmPath int8_linear_resolve_path(const Int8LinearCudaParams& p);
// Whether `path` can run on the current device in this build (kCutlassSm90: compiled with CUTLASS
// for sm_90a and a compute capability 9.0 device; kCutlassSm80: compiled with CUTLASS and code
// for the device's arch, compute capability >= 8.0).
bool int8_linear_path_available(Int8GemmPath path);
const char* int8_gemm_path_name(Int8GemmPath path);
// What kAuto (with the environment) runs for H3's block projections on the current device
// (aligned operands), in words for users: e.g. "CUTLASS wgmma, scales and bias in the
// epilogue" (`h3rt info`).
std::string int8_gemm_default_description();
// The GEMM kAuto (with the environment) runs for an aligned (rows, in, out) call on the current
// device, for reports: the path's name, and for kCutlassSm90 the config and the table it came
// from, e.g. "cutlass_sm90 128x256_n2 (h100 table)".
std::string int8_gemm_choice(int64_t rows, int64_t in, int64_t out);
// The CUTLASS config `p` runs with when it resolves to kCutlassSm90: p.cutlass_config, else the
// environment's (when p.path is kAuto), else the table's entry for (rows, out, in). Never kAuto.
Int8CutlassConfig int8_linear_resolve_cutlass_config(const Int8LinearCudaParams& p);
// "256x128", "128x256_n4", ... ("auto" for kAuto).
const char* int8_cutlass_config_name(Int8CutlassConfig config);

// kAuto's CUTLASS config for a (rows, in, out) GEMM, from `h3rt bench int8-gemm` sweeps checked
// inside the block (int8_linear.cu): the entry for this N x K with the largest min_rows <= rows,
// or the default config. Never kAuto.
Int8CutlassConfig int8_cutlass_table_config(int64_t rows, int64_t in, int64_t out);

}  // namespace h3rt::ops
#endif  // H3RT_HAVE_CUDA
