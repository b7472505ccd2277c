// kBlockScaledSm100: native block-scaled NVFP4 GEMM through cuBLASLt on Blackwell (compute
// capability 10.x and 12.x: sm_100/sm_103 data-centre parts, sm_120/sm_121 RTX and GB10).
//
// cuBLASLt takes CUDA_R_4F_E2M1 operands with CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 block
// scales: one e4m3 scale per 16 elements along K in the 128x4 tiled layout, which is exactly
// our scale layout (src/formats/nvfp4_layout.h), so the scale tensors are passed as they are.
// alpha = g_a * g_w comes from device memory; bias epilogue; bf16 out with row strides.
//
// Nibble order: cuBLAS packs element 2j in the LOW nibble of byte j, our format (comfy-kitchen)
// in the HIGH nibble. Each call therefore first swaps the nibbles of both operands into the
// workspace: a memory-bound pass reading and writing (rows + out) * in / 2 bytes (for the seed
// qkv projection, 37,810 x 5,376 activations + 16,128 x 5,376 weights: 145 MB read + 145 MB
// written, about 0.07 ms at 4 TB/s against a GEMM of several ms). Repacking the weights once at
// load time would remove the weight half of that pass.
//
// W4A16 (bf16 activations) is not a block-scaled problem: this path declines it
// (cudaErrorNotSupported) and kAuto falls back to kDequantCublas.
// Runs only when the device's compute capability is 10.x or 12.x, our kernels are compiled for it
// (H3RT_CUDA_ARCH_LIST) and cuBLASLt offers an algorithm; otherwise cudaErrorNotSupported. It has
// not been run on hardware by this project yet: the development GPU is an H200 (sm_90), where it
// reports cudaErrorNotSupported.
//
// Workspace: [alpha: out floats][W codes: out x in/2][A codes: rows x in/2]
// [cuBLASLt scratch], each part 256-byte aligned.
#include <algorithm>

#include "cuda/runtime.h"
#include "ops/linear/cublaslt_gemm.h"
#include "ops/linear_nvfp4/linear_nvfp4_kernels.h"

namespace h3rt::ops::nvfp4_gemm {
namespace {

// dst = src with the two nibbles of every byte exchanged, 16 bytes per thread; threads
// i < alpha_n also write alpha[i] = g_a * g_w.
__global__ void swap_nibbles_kernel(const uint4* src, uint4* dst, int64_t n16, const float* g_a,
                                    const float* g_w, float* alpha, int64_t alpha_n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (alpha && i < alpha_n) alpha[i] = __fmul_rn(*g_a, *g_w);
  if (i >= n16) return;
  uint4 v = __ldcs(src + i);
  v.x = ((v.x >> 4) & 0x0f0f0f0fu) | ((v.x & 0x0f0f0f0fu) << 4);
  v.y = ((v.y >> 4) & 0x0f0f0f0fu) | ((v.y & 0x0f0f0f0fu) << 4);
  v.z = ((v.z >> 4) & 0x0f0f0f0fu) | ((v.z & 0x0f0f0f0fu) << 4);
  v.w = ((v.w >> 4) & 0x0f0f0f0fu) | ((v.w & 0x0f0f0f0fu) << 4);
  dst[i] = v;
}

cudaError_t swap_nibbles(const uint8_t* src, uint8_t* dst, int64_t bytes, const float* g_a,
                         const float* g_w, float* alpha, int64_t alpha_n, cudaStream_t s) {
  const int64_t n16 = bytes / 16, threads = std::max(n16, alpha_n);
  if (threads == 0) return cudaSuccess;
  swap_nibbles_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, s>>>(
      reinterpret_cast<const uint4*>(src), reinterpret_cast<uint4*>(dst), n16, g_a, g_w, alpha,
      alpha_n);
  return H3RT_LAUNCH_CHECK("linear_nvfp4 swap_nibbles");
}

struct Layout {
  size_t alpha, w, a, lt, total;
};
Layout layout_of(const LinearNvfp4CudaParams& p) {
  Layout l;
  l.alpha = 0;
  l.w = l.alpha + up256(size_t(p.out) * sizeof(float));
  l.a = l.w + up256(size_t(p.out) * p.in / 2);
  l.lt = l.a + up256(size_t(p.rows) * p.in / 2);
  l.total = l.lt + lt::kWorkspaceBytes;
  return l;
}

bool device_is_blackwell() {
  const int cc = cuda::current_device_cc();
  const int major = cc / 10, minor = cc % 10;
  return (major == 10 || major == 12) && cuda::compiled_arch_supports(major, minor) != 0;
}

}  // namespace

size_t block_scaled_sm100_workspace_bytes(const LinearNvfp4CudaParams& p) {
  return p.a_q ? layout_of(p).total : 0;
}

// Expects the dispatcher's checked and normalised params (row strides set).
cudaError_t block_scaled_sm100(const LinearNvfp4CudaParams& p, cudaStream_t stream) {
#if CUDART_VERSION < 12080
  return cudaErrorNotSupported;  // CUDA_R_4F_E2M1 arrived with CUDA 12.8
#else
  if (!p.a_q || !device_is_blackwell()) return cudaErrorNotSupported;
  const Layout l = layout_of(p);
  H3RT_CHECK(p.workspace && p.workspace_bytes >= l.total,
             "linear_nvfp4 (block_scaled_sm100): workspace of ", p.workspace_bytes, " bytes, need ",
             l.total);
  char* ws = static_cast<char*>(p.workspace);
  float* alpha = reinterpret_cast<float*>(ws + l.alpha);
  auto* wq = reinterpret_cast<uint8_t*>(ws + l.w);
  auto* aq = reinterpret_cast<uint8_t*>(ws + l.a);
  cudaError_t e =
      swap_nibbles(p.w_q, wq, p.out * p.in / 2, p.a_global, p.w_global, alpha, p.out, stream);
  if (e != cudaSuccess) return e;
  e = swap_nibbles(p.a_q, aq, p.rows * p.in / 2, nullptr, nullptr, nullptr, 0, stream);
  if (e != cudaSuccess) return e;
  lt::Gemm m = lt_gemm_base(p, lt::Operands::kFp4BlockScaled, alpha, ws + l.lt);
  m.w = wq;
  m.x = aq;
  m.x_ld = p.in;
  m.w_scale = p.w_scales;
  m.x_scale = p.a_scales;
  return lt::gemm(m, stream);
#endif
}

}  // namespace h3rt::ops::nvfp4_gemm
