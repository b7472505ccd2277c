// swiglu on the GPU (declared in swiglu.h): out = round(round(silu(gate)) * value) over the
// [gate | value] halves of each fc1 output row. One block per row, 16-byte vectors.
// exact_exp: exp(-g) is evaluated in double and rounded to float, i.e. correctly rounded, which
// matches the host's expf (glibc, <= 0.502 ulp) so the result is bit-exact with swiglu_cpu; the
// fast path uses the device expf (<= 2 ulp), which can move a result by one bf16 ulp when the
// float value sits next to a bf16 rounding boundary.
#include <algorithm>

#include "cuda/device_math.cuh"
#include "cuda/runtime.h"
#include "ops/swiglu/swiglu.h"

namespace h3rt::ops {

namespace {

using cuda::rbf;

template <bool kExactExp>
__device__ __forceinline__ float silu_dev(float g) {
  const float e = kExactExp ? static_cast<float>(exp(-static_cast<double>(g))) : expf(-g);
  return __fdiv_rn(g, __fadd_rn(1.0f, e));
}

template <bool kExactExp>
__global__ void swiglu_kernel(SwigluCudaParams p) {
  const int64_t row = blockIdx.x;
  const int nvec = static_cast<int>(p.ffn / 8);
  const __nv_bfloat16* gr = p.in + row * p.in_row_stride;
  const __nv_bfloat16* vr = gr + p.ffn;
  __nv_bfloat16* orow = p.out + row * p.out_row_stride;
  for (int c = threadIdx.x; c < nvec; c += blockDim.x) {
    float g[8], v[8];
    cuda::unpack8(cuda::load8_stream(gr + c * 8), g);
    cuda::unpack8(cuda::load8_stream(vr + c * 8), v);
#pragma unroll
    for (int e = 0; e < 8; ++e) g[e] = rbf(__fmul_rn(rbf(silu_dev<kExactExp>(g[e])), v[e]));
    cuda::store8(orow + c * 8, cuda::pack8(g));
  }
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace

cudaError_t swiglu_cuda(const SwigluCudaParams& in, cudaStream_t stream) {
  SwigluCudaParams p = in;
  if (!p.in_row_stride) p.in_row_stride = 2 * p.ffn;
  if (!p.out_row_stride) p.out_row_stride = p.ffn;
  H3RT_CHECK(p.in && p.out && p.rows >= 0 && p.ffn > 0, "swiglu_cuda: bad params");
  H3RT_CHECK(p.ffn % 8 == 0 && p.in_row_stride % 8 == 0 && p.out_row_stride % 8 == 0,
             "swiglu_cuda: ffn ", p.ffn, " and row strides must be multiples of 8");
  H3RT_CHECK(p.in_row_stride >= 2 * p.ffn, "swiglu_cuda: input row stride < 2*ffn");
  H3RT_CHECK(aligned16(p.in) && aligned16(p.out), "swiglu_cuda: pointers must be 16-byte aligned");
  if (p.rows == 0) return cudaSuccess;
  const int nvec = static_cast<int>(p.ffn / 8);
  const int threads = std::min(256, (nvec + 31) / 32 * 32);
  if (p.exact_exp)
    swiglu_kernel<true><<<static_cast<unsigned>(p.rows), threads, 0, stream>>>(p);
  else
    swiglu_kernel<false><<<static_cast<unsigned>(p.rows), threads, 0, stream>>>(p);
  return H3RT_LAUNCH_CHECK("swiglu");
}

}  // namespace h3rt::ops
