// finite_check on the GPU (finite_check.h): a grid-stride pass over 32-bit words (two bf16 or one
// float each), 16-byte vectors on the aligned body, an OR across the CTA, one atomicMin per CTA
// that saw a non-finite value.
#include <algorithm>
#include <cstdint>

#include "ops/finite_check/finite_check.h"

namespace h3rt::ops {
namespace {

__device__ __forceinline__ bool bad_word(uint32_t w, bool bf16) {
  if (!bf16) return (w & 0x7f800000u) == 0x7f800000u;
  return (w & 0x7f80u) == 0x7f80u || (w & 0x7f800000u) == 0x7f800000u;
}

// x holds n elements of esize bytes: a scalar prefix of `pre` elements (up to the first 16-byte
// boundary), `vecs` 16-byte vectors, then a scalar tail.
__global__ void flag_kernel(const unsigned char* x, int64_t n, int esize, int64_t pre, int64_t vecs,
                            int tag, int* flag) {
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const bool bf16 = esize == 2;
  bool bad = false;
  const uint4* v = reinterpret_cast<const uint4*>(x + pre * esize);
  for (int64_t i = tid; i < vecs; i += stride) {
    const uint4 q = __ldg(v + i);
    bad |= bad_word(q.x, bf16) | bad_word(q.y, bf16) | bad_word(q.z, bf16) | bad_word(q.w, bf16);
  }
  // The scalar prefix and tail, one element per thread (a bf16 element in the low half).
  const int64_t per_vec = 16 / esize, tail0 = pre + vecs * per_vec;
  for (int64_t i = tid; i < pre + (n - tail0); i += stride) {
    const int64_t e = i < pre ? i : tail0 + (i - pre);
    uint32_t w = 0;
    if (bf16)
      w = *reinterpret_cast<const uint16_t*>(x + e * 2);
    else
      w = *reinterpret_cast<const uint32_t*>(x + e * 4);
    bad |= bad_word(w, bf16);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicMin(flag, tag);
}

}  // namespace

cudaError_t flag_non_finite_cuda(const void* x, bool bf16, int64_t n, int tag, int* flag,
                                 cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int esize = bf16 ? 2 : 4;
  const auto addr = reinterpret_cast<uintptr_t>(x);
  // Elements before the first 16-byte boundary (x is at least element-aligned).
  int64_t pre = addr % 16 == 0 ? 0 : static_cast<int64_t>((16 - addr % 16) / esize);
  pre = std::min(pre, n);
  const int64_t vecs = (n - pre) * esize / 16;
  constexpr int kThreads = 256;
  const int64_t work = std::max<int64_t>(vecs, n - vecs * (16 / esize));
  const int blocks =
      static_cast<int>(std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, 2048));
  flag_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const unsigned char*>(x), n, esize, pre,
                                               vecs, tag, flag);
  return cudaGetLastError();
}

}  // namespace h3rt::ops
