// int8 W8A8 linears as ComfyUI stores and computes them (comfy-kitchen's int8_tensorwise layout,
// optionally with "convrot", a group-wise Hadamard rotation), with a plain host reference. The
// semantics are those of ../shared/golden/int8_convrot/README.md; the golden vectors check them
// byte for byte.
//
// Rotation (convrot, group size G a power of 4): H = the Kronecker power of
// H4 = [[1,1,1,-1],[1,1,-1,1],[1,-1,1,1],[-1,1,1,1]] divided by sqrt(G) (a power of two, so
// every entry is exactly +-2^-m); H is symmetric and orthogonal. Each group of G consecutive
// input columns of a row is multiplied by H: rot(x)[g*G + j] = sum_i x[g*G + i] H[i][j]. We
// rotate exactly (sums in double, one rounding to f32, then to bf16), which is what torch's bf16
// matmul computes up to the order of its f32 accumulation. The GPU gives the same q and scale
// bytes in one of two forms (src/ops/int8_linear/rotate_quantize.cuh): the same double
// butterflies, or (default on Hopper and on sm_120 / sm_121, whose FP64 is slow) exact integer
// sums of the bf16 values as integers times 2^(e_min - 134) (int32 where a group's exponents span
// at most 14 binades, else int64 where FP64 is slow), converted with one f32 rounding, falling back
// to the double butterflies for groups whose exponents span more than 45 - log2 G binades (or more
// than 14 where the int64 tier is absent).
//
// Per row r of a bf16 matrix A (weight or activation), after the rotation when convrot:
//   s_r = max(float(amax|A_r|) / 127, 1e-30)                      (f32)
//   q   = clamp(rne(bf16(A / bf16(s_r))), -128, 127)              (int8)
// Output: y = bf16(float(sum_k q_x q_w) * (s_x[row] * s_w[col])), then bf16(y + bias).
// Plain int8_tensorwise (no convrot) skips the rotation; its weight scale may be one scalar.
#pragma once

#include <cstdint>

#include "h3rt/tensor.h"

namespace h3rt {

inline constexpr int64_t kConvrotDefaultGroup = 256;

// True for the group sizes a rotation is defined for: powers of 4 from 4 up.
bool convrot_group_valid(int64_t g);

// Sign (+1/-1) of entry (i, j) of the unnormalized Kronecker power of H4 (any size >= i, j).
int hadamard_sign(int64_t i, int64_t j);

// Rotates each group of `g` columns of the f32 rows x [rows, k] (row stride k) into y, exactly
// as above but without the final bf16 rounding (y holds the f32-rounded exact sums).
void hadamard_rotate_rows(const float* x, float* y, int64_t rows, int64_t k, int64_t g);

struct Int8Rows {
  Tensor q;      // i8 [rows, k]
  Tensor scale;  // f32 [rows, 1] (f32 [] from int8_quantize_tensor)
};

// Quantizes the rows of a 2-D bf16 or f32 host tensor (values are taken as bf16: f32 input is
// rounded to bf16 first), rotating first when `group` > 0 (group must be valid and divide k).
// Used for weights (offline) and activations (per call): the rule is the same.
Int8Rows int8_quantize_rows(const Tensor& a, int64_t group);

// Plain int8_tensorwise with one scale for the whole tensor: the same rule as
// int8_quantize_rows (no rotation) with s = max(amax / 127, 1e-30) over all values; scale is
// f32 [] (a scalar).
Int8Rows int8_quantize_tensor(const Tensor& a);

// y [m, n] bf16 = the int8 GEMM of activation rows `x` and weight rows `w` (both Int8Rows with
// the same k), scaled per row and column; `w_scale` may instead be a single scalar (plain
// tensorwise). `bias` (bf16 or f32 [n]) optional.
Tensor int8_linear(const Int8Rows& x, const Tensor& wq, const Tensor& w_scale, const Tensor* bias);

// The dequantized weight in the ORIGINAL basis, f32 [n, k]: q * s, rotated back by H (H is its
// own inverse). The CPU reference's dense view of an int8 layer.
Tensor int8_dequantize_weight(const Tensor& wq, const Tensor& w_scale, int64_t group);

// Per-row scale values of a weight_scale tensor ([], [1], [n] or [n, 1]) for n rows.
std::vector<float> int8_row_scales(const Tensor& w_scale, int64_t n);

// The `int8-convrot` file transform: reads bf16 `w` [N,K] and optional `x` [M,K] and `bias` [N]
// from in_path, writes `wq`, `ws` and, with x, `xq`, `xs`, `y` to out_path. The group size is
// `group` when > 0, else the file's __metadata__ "group_size", else 256.
void int8_convrot_file(const std::string& in_path, const std::string& out_path, int64_t group);

}  // namespace h3rt
