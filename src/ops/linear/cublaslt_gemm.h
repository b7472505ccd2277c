// The one cuBLASLt entry point of the project: y[rows, out] = bf16(alpha * (x . W^T) + b), for
// bf16 operands, fp8 e4m3 with per-tensor scales, and NVFP4 block-scaled operands (Blackwell).
//
// Layout: x [rows, in], W [out, in] and y [rows, out] are row-major (rows of x and y strided).
// cuBLASLt is column-major, so we compute y^T = W x^T: cuBLAS's A = W viewed as a column-major
// in x out matrix with op T, B = x as in x rows with op N, C = D = y^T (out x rows, ld = y's row
// stride). This "TN" form is also the one the fp8 and block-scaled kernels require.
//
// Scales: kFp8 multiplies by *w_scale * *x_scale (device float scalars; cuBLAS's A scale is the
// weight's). kFp4BlockScaled takes the e4m3 block scales (one per 16 along K, 128x4 tiled
// layout: CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3) and packed e2m1 operands with element 2j in
// the LOW nibble, as cuBLAS packs them.
// alpha: null means 1 (host pointer mode). Otherwise a device float[out] with every entry equal,
// so values computed on the device never travel to the host (no synchronisation; graph
// capturable): the plan uses pointer mode DEVICE (alpha[0], beta a device zero, so y must not
// contribute) and falls back to ALPHA_DEVICE_VECTOR_BETA_ZERO where the heuristic offers no
// algorithm for DEVICE.
// kInt8: int8 operands, CUBLAS_COMPUTE_32I, int32 output to y_i32 (no scales, alpha, bias or bf16
// y): the raw accumulator for an exact epilogue of the caller's (ops/int8_linear).
// Plans (descriptors, layouts, the heuristic's algorithm) are cached per problem, alignment and
// device; without a caller workspace, one per (device, stream) is used, so concurrent streams
// never share one.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace h3rt::ops::lt {

inline constexpr size_t kWorkspaceBytes = size_t(32) << 20;

enum class Operands : uint8_t { kBf16, kFp8, kFp4BlockScaled, kInt8 };

struct Gemm {
  Operands kind = Operands::kBf16;
  const void* w = nullptr;        // [out, in] (bf16, e4m3, int8, or packed e2m1 bytes)
  const void* x = nullptr;        // [rows, x_ld]
  int64_t x_ld = 0;               // elements
  const void* w_scale = nullptr;  // kFp8: float scalar; kFp4BlockScaled: tiled e4m3
  const void* x_scale = nullptr;
  const float* alpha = nullptr;         // device float[out], all equal; null: 1
  const __nv_bfloat16* bias = nullptr;  // [out] or null
  __nv_bfloat16* y = nullptr;           // [rows, y_ld]
  int32_t* y_i32 = nullptr;             // kInt8 instead of y: [rows, y_ld] int32
  int64_t y_ld = 0;
  int64_t rows = 0, in = 0, out = 0;
  bool fast_accum = false;    // kFp8: Hopper fast accumulation (less exact)
  void* workspace = nullptr;  // kWorkspaceBytes of device memory, or null (internal)
  // Which algorithm runs. 0: h3rt's pick, the heuristic's first unless a preferred configuration
  // is listed for the shape and GPU (cublaslt_gemm.cu; H3RT_CUBLASLT_TABLE=0 turns the list
  // off). With `listed` (benchmarks: bench gemm-algos), index algo (up to kMaxAlgos - 1) of the
  // heuristic's list as algos() returns it. Each has its own plan.
  int algo = 0;
  bool listed = false;
};

inline constexpr int kMaxAlgos = 32;

// One of the heuristic's algorithms for a problem, as cuBLASLt describes its configuration.
// reduction: cuBLASLt's split-K reduction scheme (0 none, 1 in place in the output, 2 in the
// compute type, 4 in the output type): schemes 1 and 4 add split_k bf16 roundings of partial
// sums, a less exact product than one float32 accumulation.
struct AlgoInfo {
  int id = 0, tile = 0, stages = 0, split_k = 0, reduction = 0, swizzle = 0, cluster = 0,
      custom = 0;
  size_t workspace_bytes = 0;
  float waves = 0;  // the heuristic's wave count
  bool same_config(const AlgoInfo& o) const {
    return id == o.id && tile == o.tile && stages == o.stages && split_k == o.split_k &&
           reduction == o.reduction && swizzle == o.swizzle && cluster == o.cluster &&
           custom == o.custom;
  }
};
// The heuristic's algorithms for g (its shape, kind, alignment and epilogue; g.algo ignored),
// best first, at most `max` (1..kMaxAlgos): Gemm::algo = i runs the i-th. Empty when there is
// none.
std::vector<AlgoInfo> algos(const Gemm& g, int max);
// The configuration gemm(g) runs (its plan, built if needed; g.algo honoured); throws when g
// has no algorithm.
AlgoInfo algo_of(const Gemm& g);

// A Gemm holding the output, bias and shape of `p`, a linear op's parameter struct (fields bias,
// y, y_row_stride, rows, in, out); the caller sets the operands and the rest.
template <typename P>
Gemm output_gemm(const P& p, Operands kind) {
  Gemm g;
  g.kind = kind;
  g.bias = p.bias;
  g.y = p.y;
  g.y_ld = p.y_row_stride;
  g.rows = p.rows;
  g.in = p.in;
  g.out = p.out;
  return g;
}

// cudaErrorNotSupported when cuBLASLt has no algorithm for the problem (e.g. block-scaled FP4 on
// a GPU without it); cuBLASLt failures otherwise throw h3rt::Error.
cudaError_t gemm(const Gemm& g, cudaStream_t stream);

}  // namespace h3rt::ops::lt
#endif  // H3RT_HAVE_CUDA
