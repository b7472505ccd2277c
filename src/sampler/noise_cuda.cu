// One thread per Philox block of four values (see sampler/noise.h); grid-stride loop.
// Plain CUDA with no architecture-specific instructions, so it builds for every listed arch.
#include "sampler/noise.h"
#include "sampler/noise_cuda.h"

namespace h3rt {
namespace {

__global__ void gaussian_noise_kernel(uint64_t seed, uint64_t stream, uint64_t offset, float* out,
                                      uint64_t n, uint64_t first_block, uint64_t num_blocks) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < num_blocks;
       j += stride)
    noise::gaussian_block_store(seed, stream, offset, out, n, first_block + j);
}

}  // namespace

cudaError_t gaussian_noise_cuda(const GaussianNoiseParams& p, cudaStream_t s) {
  if (p.offset < 0 || p.n < 0 || (p.n > 0 && p.out == nullptr)) return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  const uint64_t offset = static_cast<uint64_t>(p.offset), n = static_cast<uint64_t>(p.n);
  const uint64_t first = offset / 4, last = (offset + n - 1) / 4;
  const uint64_t num_blocks = last - first + 1;
  constexpr int kThreads = 256;
  const uint64_t want = (num_blocks + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(want < 65535 ? want : 65535);
  gaussian_noise_kernel<<<grid, kThreads, 0, s>>>(p.seed, p.stream, offset, p.out, n, first,
                                                  num_blocks);
  return cudaGetLastError();
}

}  // namespace h3rt
