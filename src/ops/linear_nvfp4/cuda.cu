// linear_nvfp4 on the GPU: argument checks and the choice of algorithm (linear_nvfp4.h).
//
// kAuto prefers, by the device's compute capability and the compiled arch list:
//   10.x / 12.x with a matching arch compiled -> kBlockScaledSm100 (native block-scaled NVFP4)
//   otherwise                                 -> kDequantCublas
// and falls back to kDequantCublas when the preferred algorithm declines the problem
// (cudaErrorNotSupported: W4A16 on the block-scaled path, shapes cuBLASLt rejects, an algorithm
// not built in). linear_nvfp4_workspace_bytes(kAuto) therefore covers both. An explicitly named
// algorithm never falls back: it runs or returns cudaErrorNotSupported.
// Hopper has no NVFP4 tensor-core path; dequantize + cuBLASLt is its one algorithm. The sm_90a
// wgmma kernels that dequantized inside their mainloop always lost to it and were retired
// (bench/RESULTS.md, "NVFP4 mainloop kernels retired").
#include <algorithm>

#include "cuda/runtime.h"
#include "ops/linear_nvfp4/linear_nvfp4.h"
#include "ops/linear_nvfp4/linear_nvfp4_kernels.h"

namespace h3rt::ops {
namespace {

LinearNvfp4CudaParams normalised(const LinearNvfp4CudaParams& in) {
  LinearNvfp4CudaParams p = in;
  if (!p.a_row_stride) p.a_row_stride = p.in;
  if (!p.y_row_stride) p.y_row_stride = p.out;
  return p;
}

void check(const LinearNvfp4CudaParams& p) {
  const char* f = "linear_nvfp4_cuda: ";
  H3RT_CHECK(p.rows >= 0 && p.in > 0 && p.out > 0, f, "bad dims rows=", p.rows, " in=", p.in,
             " out=", p.out);
  H3RT_CHECK(p.in % 64 == 0, f, "in (", p.in, ") must be a multiple of 64 (4 block scales)");
  H3RT_CHECK(p.out % 8 == 0, f, "out (", p.out, ") must be a multiple of 8");
  H3RT_CHECK(p.w_q && p.w_scales && p.w_global, f,
             "weights need w_q [out, in/2], w_scales (tiled) and w_global (device scalar)");
  H3RT_CHECK(p.y, f, "y [rows, y_row_stride] is required");
  H3RT_CHECK((p.a_q != nullptr) != (p.a != nullptr), f,
             "set exactly one of a_q (NVFP4 activations, W4A4) and a (bf16, W4A16)");
  if (p.a_q) {
    H3RT_CHECK(p.a_scales && p.a_global, f,
               "NVFP4 activations need a_scales (tiled) and a_global (device scalar)");
    H3RT_CHECK(cuda::aligned16(p.a_q), f, "a_q must be 16-byte aligned");
  } else {
    H3RT_CHECK(p.a_row_stride >= p.in && p.a_row_stride % 8 == 0, f, "a row stride (",
               p.a_row_stride, ") must be a multiple of 8 and >= in (", p.in, ")");
    H3RT_CHECK(cuda::aligned16(p.a), f, "a must be 16-byte aligned");
  }
  H3RT_CHECK(p.y_row_stride >= p.out && p.y_row_stride % 8 == 0, f, "y row stride (",
             p.y_row_stride, ") must be a multiple of 8 and >= out (", p.out, ")");
  H3RT_CHECK(cuda::aligned16(p.w_q) && cuda::aligned16(p.y), f,
             "w_q and y must be 16-byte aligned");
  H3RT_CHECK(std::max(p.rows, p.out) * (p.in / 16) < (int64_t(1) << 31), f,
             "rows or out times in/16 must stay below 2^31");
}

cudaError_t run(Nvfp4GemmAlgo algo, const LinearNvfp4CudaParams& p, cudaStream_t s) {
  switch (algo) {
    case Nvfp4GemmAlgo::kDequantCublas:
      return nvfp4_gemm::dequant_cublas(p, s);
    case Nvfp4GemmAlgo::kBlockScaledSm100:
      return nvfp4_gemm::block_scaled_sm100(p, s);
    case Nvfp4GemmAlgo::kAuto:
      break;
  }
  return cudaErrorInvalidValue;
}

size_t workspace_of(Nvfp4GemmAlgo algo, const LinearNvfp4CudaParams& p) {
  switch (algo) {
    case Nvfp4GemmAlgo::kDequantCublas:
      return nvfp4_gemm::dequant_cublas_workspace_bytes(p);
    case Nvfp4GemmAlgo::kBlockScaledSm100:
      return nvfp4_gemm::block_scaled_sm100_workspace_bytes(p);
    case Nvfp4GemmAlgo::kAuto:
      break;
  }
  return 0;
}

}  // namespace

Nvfp4GemmAlgo linear_nvfp4_resolve(Nvfp4GemmAlgo algo) {
  if (algo != Nvfp4GemmAlgo::kAuto) return algo;
  const int cc = cuda::current_device_cc();
  const int major = cc / 10, minor = cc % 10;
  if ((major == 10 || major == 12) && cuda::compiled_arch_supports(major, minor))
    return Nvfp4GemmAlgo::kBlockScaledSm100;
  return Nvfp4GemmAlgo::kDequantCublas;
}

size_t linear_nvfp4_workspace_bytes(const LinearNvfp4CudaParams& in) {
  const LinearNvfp4CudaParams p = normalised(in);
  const Nvfp4GemmAlgo algo = linear_nvfp4_resolve(p.algo);
  size_t bytes = workspace_of(algo, p);
  if (p.algo == Nvfp4GemmAlgo::kAuto && algo != Nvfp4GemmAlgo::kDequantCublas)
    bytes = std::max(bytes, workspace_of(Nvfp4GemmAlgo::kDequantCublas, p));
  return bytes;
}

cudaError_t linear_nvfp4_cuda(const LinearNvfp4CudaParams& in, cudaStream_t stream) {
  const LinearNvfp4CudaParams p = normalised(in);
  check(p);
  if (p.rows == 0) return cudaSuccess;
  const Nvfp4GemmAlgo algo = linear_nvfp4_resolve(p.algo);
  cudaError_t e = run(algo, p, stream);
  if (e == cudaErrorNotSupported && p.algo == Nvfp4GemmAlgo::kAuto &&
      algo != Nvfp4GemmAlgo::kDequantCublas)
    e = run(Nvfp4GemmAlgo::kDequantCublas, p, stream);
  return e;
}

}  // namespace h3rt::ops
