#include "bench/bench_data.h"
#include "cuda/runtime.h"

namespace h3rt::bench {
namespace {

__global__ void fill_kernel(uint16_t* x, int64_t n, int64_t cols, float amp, bool row_spread,
                            uint64_t salt) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t h = (uint64_t(i) + salt) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    float v = (float(h >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * amp;
    if (row_spread) {
      const uint64_t r = uint64_t(i / cols) * 0x94D049BB133111EBull + salt;
      v *= 0.25f + 3.75f * float((r >> 40) & 0xffff) / 65535.0f;
    }
    x[i] = uint16_t(__float_as_uint(v) >> 16);  // truncation: any bf16 value will do
  }
}

}  // namespace

void fill_hashed_bf16(void* x, int64_t n, int64_t cols, float amp, bool row_spread, uint64_t salt,
                      cudaStream_t stream) {
  fill_kernel<<<1024, 256, 0, stream>>>(static_cast<uint16_t*>(x), n, cols > 0 ? cols : 1, amp,
                                        row_spread, salt);
  H3RT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace h3rt::bench
