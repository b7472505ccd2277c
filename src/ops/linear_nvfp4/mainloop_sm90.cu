// NVFP4 GEMM for sm_90a with both operands dequantized inside the mainloop (warpgroup MMA).
//
// y[rows, out] = bf16(alpha * (A . W^T) + bias), A = activations (NVFP4 codes + block scales, or
// bf16 for W4A16), W = NVFP4 weights [out, in]; alpha = g_a * g_w (W4A4) or g_w (W4A16).
//
// CTA tile 128 (rows) x 256 (out), K step 64 = 4 scale blocks; 384 threads:
//   WG0 producer: one thread streams each K step's packed A tile (128 x 32 B, TMA, 32B swizzle),
//       packed W tile (256 x 32 B), and their block scales (one 512-byte piece of the 128x4
//       tiled layout per 128 rows, cp.async.bulk) into a kStages ring (full / empty mbarriers).
//   WG1, WG2 consumers: each owns 64 rows and the full 256 columns (m64n256k16 wgmma, fp32
//       accumulators in registers). Per K step every consumer thread dequantizes
//       - one W row (64 elements) into a bf16/f16 shared tile in the 128B-swizzled K-major layout
//         wgmma reads (3 buffers: written for step k+1 while step k's wgmma run), and
//       - (W4A4) its own 2 x 16 A elements straight into the wgmma A-operand registers (RS);
//         for W4A16 the bf16 A tile goes from TMA (128B swizzle) to the wgmma as is (SS).
//   One named barrier per K step publishes the dequantized W tile.
// Registers: launch bounds give 384 x 168; setmaxnreg moves them from WG0 (24) to the consumers
// (240), which hold 128 accumulators, two sets of A fragments and the dequantization temporaries.
// Keep ptxas free of C7512 / spills here (-Xptxas -v): serialized wgmma cost 40% of the speed.
// Dequantization, W4A4: a code (s, e1 e0 m) becomes the high byte s|000|e1 e0 m|0 of an f16 whose
// low byte is 0, i.e. value * 2^-14 (0.5 lands on the f16 subnormal 2^-15, exactly like the
// e2m1 subnormal), built with shifts and masks and spread into f16 pairs with byte permutes (no
// conversion instruction: the e4m3 -> f16 cvt runs at a quarter of the integer pipe's rate and
// bounded this loop), then times the block scale * 2^7 in f16 (<= 448 * 128 < 65504). The
// product value * scale * 2^-7 has at most 6 significant bits and is a multiple of 2^-17 in
// [2^-17, 21]: exact in f16. Both operands carry 2^-7, so the epilogue's alpha carries 2^14; a
// power-of-two scaling of every product leaves each fp32 rounding unchanged, so the outputs are
// the same bits as with unscaled products. W4A16: the code becomes the e4m3 byte s|000|e1 e0 m|00
// (= value * 2^-6), cvt e4m3x2 -> f16x2, times the scale * 64 in f16 (exact, in [2^-10, 2688]),
// then an exact f16 -> bf16 conversion for the bf16 wgmma. Products are exact; only the fp32
// accumulation order differs from other algorithms.
// W4A4 K order: a dot product does not care how K is permuted as long as both operands agree.
// Each A thread holds the 16 elements of ONE scale block per row (quad lane q <-> block q), in
// the order the conversion produces them; the W tile is written in the same permuted order.
// Expanded-W mode (W4A4, mainloop_sm90_expanded_w): a first kernel writes W, dequantized exactly
// as above (f16, the same 2^-7 scaling and permuted K order), to scratch; the GEMM streams it
// with TMA (128B swizzle) into each stage and hands the stage to the wgmma as is, so only A is
// dequantized in the mainloop and neither the per-step named barrier nor the proxy fence remain.
// Measured on the H200 (bench/RESULTS.md): W's in-mainloop dequantization costs ~15 of the
// ~59 ms of the four H3 projections (half arithmetic, half shared-memory traffic); A's ~3 ms.
// Constraints: in % 64 == 0, out % 8 == 0, row strides % 8 == 0, 16-byte aligned operands.
// Rows past `rows` and columns past `out` are zero-filled by TMA and never stored.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/runtime.h"
#include "cuda/sm90_async.cuh"
#include "cuda/tensor_map.h"
#include "ops/linear_nvfp4/linear_nvfp4_kernels.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define H3RT_NVFP4_SM90_ENABLED 1
#endif

namespace h3rt::ops::nvfp4_gemm {
namespace {

using namespace h3rt::cuda::sm90;  // NOLINT: the kernel reads as PTX steps

constexpr int kBM = 128;  // rows per CTA (2 consumer warpgroups x 64)
constexpr int kBN = 256;  // output columns per CTA
constexpr int kThreads = 384;
constexpr int kWTile = kBN * 64 * 2;  // one dequantized W tile (K-major, 128-byte rows)
constexpr int kWBufs = 3;             // written for step k+1 while step k (and k-1) read

// Operand modes: bf16 A with NVFP4 W; NVFP4 A and W; NVFP4 A with W expanded to f16 beforehand.
enum Mode : int { kW4A16 = 0, kW4A4 = 1, kW4A4ExpandedW = 2 };

// Shared memory of one CTA: kWBufs dequantized W tiles (none with expanded W), then the ring of
// stages, then the mbarriers. A stage: A tile (NVFP4: 128 x 32 B codes; W4A16: 128 x 128 B
// bf16), W (codes 256 x 32 B, or expanded f16 256 x 128 B), A scales (512 B, NVFP4 A), W scales
// (2 x 512 B, NVFP4 W in the stage).
template <int kMode>
struct Cfg {
  static constexpr bool kA4 = kMode != kW4A16;
  static constexpr bool kWx = kMode == kW4A4ExpandedW;
  static constexpr int kABytes = kA4 ? kBM * 32 : kBM * 128;
  static constexpr int kWOff = kABytes;  // 1024-aligned: the expanded W tile is 128B-swizzled
  static constexpr int kAScOff = kWOff + kBN * (kWx ? 128 : 32);
  static constexpr int kWScOff = kAScOff + (kA4 ? 512 : 0);
  static constexpr int kStageBytes = (kWScOff + (kWx ? 0 : 1024) + 1023) / 1024 * 1024;
  static constexpr int kStages = kWx ? 5 : kA4 ? 6 : 4;
  // Transaction bytes of one stage with `parts` W scale pieces.
  __host__ __device__ static constexpr uint32_t bytes(int parts) { return kWScOff + 512 * parts; }
  static constexpr int kRingOff = (kWx ? 0 : kWBufs) * kWTile;
  static constexpr int kBarOff = kRingOff + kStages * kStageBytes;
  static constexpr int kSmem = kBarOff + 16 * kStages + 1024;  // + alignment slack
  static_assert(kSmem <= 227 * 1024, "shared memory");
};

struct Args {
  const uint8_t* a_scales;
  const uint8_t* w_scales;
  const float* a_global;
  const float* w_global;
  const __nv_bfloat16* bias;
  __nv_bfloat16* y;
  int64_t y_stride;
  int rows, out, ksteps, tiles_m, tiles_n;
};

#ifdef H3RT_NVFP4_SM90_ENABLED

// ---- shared-memory loads / stores ----
__device__ __forceinline__ uint2 lds64(uint32_t a) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(a));
  return v;
}
__device__ __forceinline__ uint4 lds128(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(a));
  return v;
}
__device__ __forceinline__ uint32_t lds32(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ uint32_t lds8(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.u8 %0, [%1];\n" : "=r"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ void sts128(uint32_t a, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(x), "r"(y), "r"(z), "r"(w)
               : "memory");
}

// ---- dequantization ----
// Two e4m3 bytes (low 16 bits) -> f16x2, exact.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t v) {
  uint32_t r;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}\n"
      : "=r"(r)
      : "r"(v));
  return r;
}
__device__ __forceinline__ uint32_t e4m3x2_hi_to_f16x2(uint32_t v) {
  uint32_t r;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, hi;\n}\n"
      : "=r"(r)
      : "r"(v));
  return r;
}
__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
// Block scale byte `q` of `s4` as f16x2 {64 s, 64 s} (64 undoes the 2^-6 of the codes below).
__device__ __forceinline__ uint32_t scale_x2(uint32_t s4, int q) {
  const uint32_t pair = __byte_perm(s4, 0, static_cast<uint32_t>(q * 0x11));
  return hmul2(e4m3x2_to_f16x2(pair), 0x54005400u);  // f16 64.0 twice
}
// The same as {128 s, 128 s} (W4A4: undoes 2^-7 of the 2^-14 of the codes below).
__device__ __forceinline__ uint32_t scale_x2_w4a4(uint32_t s4, int q) {
  const uint32_t pair = __byte_perm(s4, 0, static_cast<uint32_t>(q * 0x11));
  return hmul2(e4m3x2_to_f16x2(pair), 0x58005800u);  // f16 128.0 twice
}
// Codes -> f16 (times 2^-14, see the header) in the dequant8 order below.
constexpr float kW4A4CodeScale = 16384.0f;  // 2^14: undone by alpha
// Eight e2m1 codes (one 32-bit word, element 2j in the high nibble of byte j) times the scale,
// as f16x2: r[0] = (e0, e2), r[1] = (e4, e6), r[2] = (e1, e3), r[3] = (e5, e7). Byte j of h
// (l) is the f16 high byte s|000|e1 e0 m|0 of element 2j (2j + 1); a byte permute puts two of
// them above zero low bytes.
__device__ __forceinline__ void dequant8(uint32_t q, uint32_t sc, uint32_t (&r)[4]) {
  const uint32_t h = (q & 0x80808080u) | ((q >> 3) & 0x0E0E0E0Eu);
  const uint32_t l = ((q << 4) & 0x80808080u) | ((q << 1) & 0x0E0E0E0Eu);
  r[0] = hmul2(__byte_perm(h, 0, 0x1404), sc);
  r[1] = hmul2(__byte_perm(h, 0, 0x3424), sc);
  r[2] = hmul2(__byte_perm(l, 0, 0x1404), sc);
  r[3] = hmul2(__byte_perm(l, 0, 0x3424), sc);
}
__device__ __forceinline__ uint32_t f16x2_to_bf16x2(uint32_t v) {
  const __half2 h = *reinterpret_cast<const __half2*>(&v);
  const __nv_bfloat162 b = __floats2bfloat162_rn(__low2float(h), __high2float(h));
  return *reinterpret_cast<const uint32_t*>(&b);
}

// Byte address of 16-byte chunk `c` of row `r` in a tile of 128-byte rows, 128B swizzle.
__device__ __forceinline__ uint32_t sw128(uint32_t base, int r, int c) {
  return base + r * 128 + ((c ^ (r & 7)) << 4);
}
// ... of 32-byte rows, 32B swizzle (TMA SWIZZLE_32B: bit 4 ^= bit 7).
__device__ __forceinline__ uint32_t sw32(uint32_t base, int r, int c) {
  return base + r * 32 + ((c ^ ((r >> 2) & 1)) << 4);
}
// The four block scales (K step's columns 0..3) of row r of a 128-row tile of the 128x4 layout.
__device__ __forceinline__ uint32_t scale_word(uint32_t base, int r) {
  return lds32(base + (r & 31) * 16 + ((r >> 5) & 3) * 4);
}

// W4A4: one W row's K step (32 code bytes c0, c1 and the four block scales s4) in the permuted
// K order (header): store(m, x, y, z, w) receives 16-byte chunk m of the 128-byte f16 row, which
// holds word m of the four blocks' dequantized words.
template <typename Store>
__device__ __forceinline__ void dequant_w_step_perm(const uint4& c0, const uint4& c1, uint32_t s4,
                                                    Store&& store) {
  const uint32_t w[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
  uint32_t sc[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) sc[q] = scale_x2_w4a4(s4, q);
#pragma unroll
  for (int wi = 0; wi < 2; ++wi) {
    uint32_t r[4][4];
#pragma unroll
    for (int q = 0; q < 4; ++q) dequant8(w[2 * q + wi], sc[q], r[q]);
#pragma unroll
    for (int p = 0; p < 4; ++p) store(4 * wi + p, r[0][p], r[1][p], r[2][p], r[3][p]);
  }
}

// W4A4: row n (0..255) of the stage's W tile into the dequantized tile (128B swizzle).
__device__ __forceinline__ void dequant_w_row_perm(uint32_t st_w, uint32_t st_sc, uint32_t dst,
                                                   int n) {
  dequant_w_step_perm(lds128(sw32(st_w, n, 0)), lds128(sw32(st_w, n, 1)),
                      scale_word(st_sc + (n >> 7) * 512, n),
                      [&](int m, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
                        sts128(sw128(dst, n, m), x, y, z, w);
                      });
}

// Expanded W: every (row, K step) of W as the GEMM's W tile row would hold it, unswizzled, into
// wx [out, in] f16 (TMA applies the swizzle when loading). One thread per (row, K step), K steps
// of a row on consecutive threads: 32 code bytes and one scale word in, 128 bytes out.
__global__ void expand_w_kernel(const uint8_t* __restrict__ w_q,
                                const uint8_t* __restrict__ w_scales, uint4* __restrict__ wx,
                                int out, int ksteps) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(out) * ksteps) return;
  const int n = static_cast<int>(i / ksteps), kt = static_cast<int>(i % ksteps);
  const uint4* codes = reinterpret_cast<const uint4*>(w_q) + 2 * i;  // row pitch 32 * ksteps
  const uint32_t s4 = *reinterpret_cast<const uint32_t*>(
      w_scales + (int64_t(n >> 7) * ksteps + kt) * 512 + (n & 31) * 16 + ((n >> 5) & 3) * 4);
  uint4* dst = wx + 8 * i;
  dequant_w_step_perm(__ldg(codes), __ldg(codes + 1), s4,
                      [&](int m, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
                        dst[m] = make_uint4(x, y, z, w);
                      });
}

// W4A16: row n of the W tile in natural K order, bf16.
__device__ __forceinline__ void dequant_w_row_bf16(uint32_t st_w, uint32_t st_sc, uint32_t dst,
                                                   int n) {
  const uint4 c0 = lds128(sw32(st_w, n, 0));
  const uint4 c1 = lds128(sw32(st_w, n, 1));
  const uint32_t s4 = scale_word(st_sc + (n >> 7) * 512, n);
  const uint32_t w[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
#pragma unroll
  for (int m = 0; m < 8; ++m) {
    const uint32_t sc = scale_x2(s4, m >> 1);
    const uint32_t q = w[m];
    const uint32_t h = (q & 0x80808080u) | ((q >> 2) & 0x1C1C1C1Cu);
    const uint32_t l = ((q << 4) & 0x80808080u) | ((q << 2) & 0x1C1C1C1Cu);
    const uint32_t p0 = __byte_perm(h, l, 0x5140), p1 = __byte_perm(h, l, 0x7362);
    sts128(sw128(dst, n, m), f16x2_to_bf16x2(hmul2(e4m3x2_to_f16x2(p0), sc)),
           f16x2_to_bf16x2(hmul2(e4m3x2_hi_to_f16x2(p0), sc)),
           f16x2_to_bf16x2(hmul2(e4m3x2_to_f16x2(p1), sc)),
           f16x2_to_bf16x2(hmul2(e4m3x2_hi_to_f16x2(p1), sc)));
  }
}

// W4A4: the A fragments of K step (4 slices x {a0, a1, a2, a3}) of a thread whose rows are r0
// and r0 + 8 and whose quad lane is q: block q of each row, slice s taking words 2s, 2s + 1.
__device__ __forceinline__ void dequant_a_frag(uint32_t st_a, uint32_t st_sc, int r0, int q,
                                               uint32_t (&af)[16]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = r0 + 8 * i;
    const uint2 v = lds64(sw32(st_a, r, q >> 1) + ((q & 1) << 3));
    const uint32_t sb = lds8(st_sc + (r & 31) * 16 + ((r >> 5) & 3) * 4 + q);
    const uint32_t sc = scale_x2_w4a4(sb, 0);
    uint32_t x[4], z[4];
    dequant8(v.x, sc, x);
    dequant8(v.y, sc, z);
    const uint32_t rr[8] = {x[0], x[1], x[2], x[3], z[0], z[1], z[2], z[3]};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      af[4 * s + i] = rr[2 * s];
      af[4 * s + 2 + i] = rr[2 * s + 1];
    }
  }
}
#define H3RT_NV_ACC128(C)                                                                       \
  C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]),     \
      C(d[10]), C(d[11]), C(d[12]), C(d[13]), C(d[14]), C(d[15]), C(d[16]), C(d[17]), C(d[18]), \
      C(d[19]), C(d[20]), C(d[21]), C(d[22]), C(d[23]), C(d[24]), C(d[25]), C(d[26]), C(d[27]), \
      C(d[28]), C(d[29]), C(d[30]), C(d[31]), C(d[32]), C(d[33]), C(d[34]), C(d[35]), C(d[36]), \
      C(d[37]), C(d[38]), C(d[39]), C(d[40]), C(d[41]), C(d[42]), C(d[43]), C(d[44]), C(d[45]), \
      C(d[46]), C(d[47]), C(d[48]), C(d[49]), C(d[50]), C(d[51]), C(d[52]), C(d[53]), C(d[54]), \
      C(d[55]), C(d[56]), C(d[57]), C(d[58]), C(d[59]), C(d[60]), C(d[61]), C(d[62]), C(d[63]), \
      C(d[64]), C(d[65]), C(d[66]), C(d[67]), C(d[68]), C(d[69]), C(d[70]), C(d[71]), C(d[72]), \
      C(d[73]), C(d[74]), C(d[75]), C(d[76]), C(d[77]), C(d[78]), C(d[79]), C(d[80]), C(d[81]), \
      C(d[82]), C(d[83]), C(d[84]), C(d[85]), C(d[86]), C(d[87]), C(d[88]), C(d[89]), C(d[90]), \
      C(d[91]), C(d[92]), C(d[93]), C(d[94]), C(d[95]), C(d[96]), C(d[97]), C(d[98]), C(d[99]), \
      C(d[100]), C(d[101]), C(d[102]), C(d[103]), C(d[104]), C(d[105]), C(d[106]), C(d[107]),   \
      C(d[108]), C(d[109]), C(d[110]), C(d[111]), C(d[112]), C(d[113]), C(d[114]), C(d[115]),   \
      C(d[116]), C(d[117]), C(d[118]), C(d[119]), C(d[120]), C(d[121]), C(d[122]), C(d[123]),   \
      C(d[124]), C(d[125]), C(d[126]), C(d[127])
#define H3RT_NV_REGS128                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "    \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "     \
  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "     \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, "     \
  "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, "     \
  "%87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, " \
  "%104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, "      \
  "%118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define H3RT_NV_RW_F(x) "+f"(x)

constexpr int kGroupM = 16;  // raster: groups of 16 row tiles walk the column tiles together

// ---- wgmma ----
// d += A B: m64n256k16 f16 x f16 -> f32, A from registers, B (K-major) from shared memory.
__device__ __forceinline__ void wgmma_f16_rs(float (&d)[128], const uint32_t* a, uint64_t db) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " H3RT_NV_REGS128
               ", {%128, %129, %130, %131}, %132, 1, 1, 1, 0;\n"
               : H3RT_NV_ACC128(H3RT_NV_RW_F)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// d += A B: m64n256k16 bf16 x bf16 -> f32, both from shared memory (K-major).
__device__ __forceinline__ void wgmma_bf16_ss(float (&d)[128], uint64_t da, uint64_t db) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " H3RT_NV_REGS128
               ", %128, %129, 1, 1, 1, 0, 0;\n"
               : H3RT_NV_ACC128(H3RT_NV_RW_F)
               : "l"(da), "l"(db));
}

struct Smem {
  uint32_t wbuf0, ring, bars;
  int stage_bytes, stages;
  __device__ uint32_t wbuf(int kt) const { return wbuf0 + (kt % kWBufs) * kWTile; }
  __device__ uint32_t stage(int kt) const { return ring + (kt % stages) * stage_bytes; }
  __device__ uint32_t full(int kt) const { return bars + 8 * (kt % stages); }
  __device__ uint32_t empty(int kt) const { return bars + 8 * (stages + kt % stages); }
  __device__ uint32_t parity(int kt) const { return (kt / stages) & 1; }
};

template <int kMode>
__device__ __forceinline__ void producer(const CUtensorMap* tm_a, const CUtensorMap* tm_w,
                                         const Args& a, const Smem& sm, int mt, int nt) {
  using C = Cfg<kMode>;
  // W scale tiles inside the tensor (none when W arrives expanded).
  const int wsc_parts = C::kWx ? 0 : (2 * nt + 1) * 128 < a.out ? 2 : 1;
  const uint32_t bytes = C::bytes(wsc_parts);
  for (int kt = 0; kt < a.ksteps; ++kt) {
    const uint32_t st = sm.stage(kt), full = sm.full(kt);
    bar_wait(sm.empty(kt), sm.parity(kt) ^ 1);
    bar_expect_tx(full, bytes);
    tma_load_2d(st, tm_a, full, C::kA4 ? kt * 32 : kt * 64, mt * kBM);
    tma_load_2d(st + C::kWOff, tm_w, full, C::kWx ? kt * 64 : kt * 32, nt * kBN);
    if (C::kA4)
      bulk_load(st + C::kAScOff, a.a_scales + (int64_t(mt) * a.ksteps + kt) * 512, 512, full);
    for (int h = 0; h < wsc_parts; ++h)
      bulk_load(st + C::kWScOff + 512 * h, a.w_scales + (int64_t(2 * nt + h) * a.ksteps + kt) * 512,
                512, full);
  }
}

// Consumer warpgroup `cw` (rows 64 cw .. 64 cw + 63 of the tile).
template <int kMode>
struct Consumer {
  using C = Cfg<kMode>;
  static constexpr bool kA4 = C::kA4;
  const Args& a;
  const Smem& sm;
  int cw, ct, r0, q;
  float acc[128];
  uint32_t af[2][16];  // NVFP4 A fragments, double-buffered by K step parity

  // Dequantizes K step kt (W row ct into its buffer, A fragments into af[b]) and publishes it.
  // With expanded W only the A fragments remain: the W tile is the stage's, ready when it lands.
  template <int b>
  __device__ __forceinline__ void prepare(int kt) {
    const uint32_t st = sm.stage(kt);
    bar_wait(sm.full(kt), sm.parity(kt));
    if constexpr (kA4) dequant_a_frag(st, st + C::kAScOff, r0, q, af[b]);
    if constexpr (C::kWx) return;  // W lands expanded in the stage: nothing to write or publish
    if constexpr (kA4) {
      dequant_w_row_perm(st + C::kWOff, st + C::kWScOff, sm.wbuf(kt), ct);
      __syncwarp();
      if ((ct & 31) == 0) bar_arrive(sm.empty(kt));  // W4A16 releases after its wgmma
    } else {
      dequant_w_row_bf16(st + C::kWOff, st + C::kWScOff, sm.wbuf(kt), ct);
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    named_sync(1, 256);
  }

  template <int b>
  __device__ __forceinline__ void step(int kt) {
    wg_fence();
    reg_fence(acc);
    if constexpr (kA4) reg_fence(af[b]);
    const uint64_t db = sw128_desc(C::kWx ? sm.stage(kt) + C::kWOff : sm.wbuf(kt));
    if constexpr (kA4) {
#pragma unroll
      for (int s = 0; s < 4; ++s) wgmma_f16_rs(acc, af[b] + 4 * s, db + 2 * s);
    } else {
      const uint64_t da = sw128_desc(sm.stage(kt) + cw * 64 * 128);
#pragma unroll
      for (int s = 0; s < 4; ++s) wgmma_bf16_ss(acc, da + 2 * s, db + 2 * s);
    }
    wg_commit();
    wg_wait<1>();  // step kt-1 retired: af[b ^ 1], its A stage and W buffer are free
    reg_fence(acc);
    if constexpr (kA4) reg_fence(af[b ^ 1]);
    if constexpr (!kA4 || C::kWx) {  // the stage's W tile was read by step kt-1's wgmma
      if (kt > 0 && (ct & 31) == 0) bar_arrive(sm.empty(kt - 1));
    }
    if (kt + 1 < a.ksteps) prepare<b ^ 1>(kt + 1);
  }

  __device__ __forceinline__ void run(int mt, int nt) {
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    prepare<0>(0);
    for (int kt = 0; kt < a.ksteps; kt += 2) {
      step<0>(kt);
      if (kt + 1 < a.ksteps) step<1>(kt + 1);
    }
    wg_wait<0>();
    reg_fence(acc);
    epilogue(mt, nt);
  }

  // y = bf16(alpha * acc + bias): thread rows r0, r0 + 8; columns 8j + 2q, +1.
  __device__ __forceinline__ void epilogue(int mt, int nt) {
    const float alpha = kA4 ? *a.a_global * *a.w_global * kW4A4CodeScale : *a.w_global;
    const int col0 = nt * kBN + 2 * q;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = mt * kBM + r0 + 8 * i;
      if (row >= a.rows) continue;
      __nv_bfloat16* yr = a.y + int64_t(row) * a.y_stride;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int col = col0 + 8 * j;
        if (col < a.out) {
          float b0 = 0.0f, b1 = 0.0f;
          if (a.bias != nullptr) {
            const __nv_bfloat162 bb = *reinterpret_cast<const __nv_bfloat162*>(a.bias + col);
            b0 = __low2float(bb);
            b1 = __high2float(bb);
          }
          *reinterpret_cast<__nv_bfloat162*>(yr + col) = __floats2bfloat162_rn(
              alpha * acc[4 * j + 2 * i] + b0, alpha * acc[4 * j + 2 * i + 1] + b1);
        }
      }
    }
  }
};

template <int kMode>
__global__ void __launch_bounds__(kThreads, 1)
    nvfp4_mainloop_kernel(const __grid_constant__ CUtensorMap tm_a,
                          const __grid_constant__ CUtensorMap tm_w,
                          const __grid_constant__ Args a) {
  using C = Cfg<kMode>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;
  const Smem sm{base, base + C::kRingOff, base + C::kBarOff, C::kStageBytes, C::kStages};
  // Raster: kGroupM row tiles advance together across the column tiles (W tiles stay in L2).
  const int t = blockIdx.x, group = kGroupM * a.tiles_n;
  const int first_m = t / group * kGroupM;
  const int gm = min(a.tiles_m - first_m, kGroupM);
  const int mt = first_m + (t % group) % gm, nt = (t % group) / gm;
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      bar_init(sm.full(s), 1);
      bar_init(sm.empty(s), 8);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (threadIdx.x == 0) producer<kMode>(&tm_a, &tm_w, a, sm, mt, nt);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    const int ct = threadIdx.x - 128, lane = ct & 31;
    Consumer<kMode> c{a, sm, wg - 1, ct, (wg - 1) * 64 + ((ct >> 5) & 3) * 16 + lane / 4, lane & 3};
    c.run(mt, nt);
  }
}

#else  // not sm_90a: an empty body keeps the symbol.

template <int kMode>
__global__ void nvfp4_mainloop_kernel(const __grid_constant__ CUtensorMap,
                                      const __grid_constant__ CUtensorMap,
                                      const __grid_constant__ Args) {}
__global__ void expand_w_kernel(const uint8_t*, const uint8_t*, uint4*, int, int) {}

#endif

bool device_is_sm90() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;
}

bool aligned(const void* p, uintptr_t n) {
  return (reinterpret_cast<uintptr_t>(p) % n) == 0;
}

bool valid(const LinearNvfp4CudaParams& p, bool w4a4) {
  const int64_t ys = p.y_row_stride ? p.y_row_stride : p.out;
  const int64_t as = p.a_row_stride ? p.a_row_stride : p.in;
  if (p.rows < 0 || p.in <= 0 || p.in % 64 != 0 || p.out <= 0 || p.out % 8 != 0) return false;
  if (p.rows >= (int64_t(1) << 31) || p.out >= (int64_t(1) << 31) || p.in >= (int64_t(1) << 31))
    return false;
  if (ys < p.out || ys % 8 != 0) return false;
  if (!p.w_q || !p.w_scales || !p.w_global || !p.y) return false;
  if (!aligned(p.w_q, 16) || !aligned(p.w_scales, 16) || !aligned(p.y, 4)) return false;
  if (p.bias && !aligned(p.bias, 4)) return false;
  if (w4a4) return p.a_scales && p.a_global && aligned(p.a_q, 16) && aligned(p.a_scales, 16);
  return p.a && as >= p.in && as % 8 == 0 && aligned(p.a, 16);
}

template <int kMode>
cudaError_t launch(const CUtensorMap& tm_a, const CUtensorMap& tm_w, const Args& a,
                   cudaStream_t stream) {
  constexpr int smem = Cfg<kMode>::kSmem;
  cudaError_t e = cudaFuncSetAttribute(nvfp4_mainloop_kernel<kMode>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  const unsigned tiles = static_cast<unsigned>(a.tiles_m) * static_cast<unsigned>(a.tiles_n);
  nvfp4_mainloop_kernel<kMode><<<tiles, kThreads, smem, stream>>>(tm_a, tm_w, a);
  return cudaGetLastError();
}

// The A operand's tensor map: NVFP4 codes (32-byte rows of one K step, 32B swizzle) or bf16.
bool a_map(CUtensorMap* tm, const LinearNvfp4CudaParams& p) {
  const uint64_t rows = static_cast<uint64_t>(p.rows), in = static_cast<uint64_t>(p.in);
  if (p.a_q)
    return cuda::make_tensor_map_2d(tm, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.a_q, in / 2, rows, in / 2,
                                    32, kBM, CU_TENSOR_MAP_SWIZZLE_32B);
  const uint64_t pitch = 2 * static_cast<uint64_t>(p.a_row_stride ? p.a_row_stride : p.in);
  return cuda::make_tensor_map_2d(tm, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, p.a, in, rows, pitch, 64,
                                  kBM, CU_TENSOR_MAP_SWIZZLE_128B);
}

Args args_of(const LinearNvfp4CudaParams& p) {
  Args a{};
  a.a_scales = p.a_scales;
  a.w_scales = p.w_scales;
  a.a_global = p.a_global;
  a.w_global = p.w_global;
  a.bias = p.bias;
  a.y = p.y;
  a.y_stride = p.y_row_stride ? p.y_row_stride : p.out;
  a.rows = static_cast<int>(p.rows);
  a.out = static_cast<int>(p.out);
  a.ksteps = static_cast<int>(p.in / 64);
  a.tiles_m = static_cast<int>((p.rows + kBM - 1) / kBM);
  a.tiles_n = static_cast<int>((p.out + kBN - 1) / kBN);
  return a;
}

size_t expanded_w_bytes(const LinearNvfp4CudaParams& p) {
  return up256(static_cast<size_t>(p.out) * static_cast<size_t>(p.in) * 2);
}

}  // namespace

cudaError_t mainloop_sm90(const LinearNvfp4CudaParams& p, cudaStream_t stream) {
  if (!cuda::compiled_arch_listed("90a") || !device_is_sm90()) return cudaErrorNotSupported;
  const bool w4a4 = p.a_q != nullptr;
  if (!valid(p, w4a4)) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  const uint64_t in = static_cast<uint64_t>(p.in);
  CUtensorMap tm_a, tm_w;
  const bool ok_w = cuda::make_tensor_map_2d(&tm_w, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.w_q, in / 2,
                                             static_cast<uint64_t>(p.out), in / 2, 32, kBN,
                                             CU_TENSOR_MAP_SWIZZLE_32B);
  if (!a_map(&tm_a, p) || !ok_w) return cudaErrorInvalidValue;
  const Args a = args_of(p);
  return w4a4 ? launch<kW4A4>(tm_a, tm_w, a, stream) : launch<kW4A16>(tm_a, tm_w, a, stream);
}

size_t mainloop_sm90_expanded_w_workspace_bytes(const LinearNvfp4CudaParams& p) {
  return p.a_q ? expanded_w_bytes(p) : 0;
}

cudaError_t mainloop_sm90_expanded_w(const LinearNvfp4CudaParams& p, cudaStream_t stream) {
  if (!cuda::compiled_arch_listed("90a") || !device_is_sm90()) return cudaErrorNotSupported;
  if (!p.a_q) return cudaErrorNotSupported;  // W4A16 with expanded W is a bf16 GEMM: kDequantCublas
  if (!valid(p, true)) return cudaErrorInvalidValue;
  H3RT_CHECK(p.workspace && p.workspace_bytes >= expanded_w_bytes(p) && aligned(p.workspace, 256),
             "linear_nvfp4 (mainloop_sm90_expanded_w): workspace of ", p.workspace_bytes,
             " bytes, need ", expanded_w_bytes(p), " (256-byte aligned)");
  if (p.rows == 0) return cudaSuccess;
  const Args a = args_of(p);
  const int64_t items = int64_t(p.out) * a.ksteps;
  expand_w_kernel<<<static_cast<unsigned>((items + 255) / 256), 256, 0, stream>>>(
      p.w_q, p.w_scales, static_cast<uint4*>(p.workspace), a.out, a.ksteps);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const uint64_t in = static_cast<uint64_t>(p.in);
  CUtensorMap tm_a, tm_w;
  const bool ok_w = cuda::make_tensor_map_2d(&tm_w, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, p.workspace,
                                             in, static_cast<uint64_t>(p.out), 2 * in, 64, kBN,
                                             CU_TENSOR_MAP_SWIZZLE_128B);
  if (!a_map(&tm_a, p) || !ok_w) return cudaErrorInvalidValue;
  return launch<kW4A4ExpandedW>(tm_a, tm_w, a, stream);
}

}  // namespace h3rt::ops::nvfp4_gemm
