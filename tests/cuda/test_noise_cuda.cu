// The device noise fill must equal the host generator bit for bit (the noise contract of
// sampler/noise.h): same seeds, streams and offsets, including partial first/last blocks and
// counters past 2^32 blocks.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "h3rt/sampler.h"
#include "sampler/noise_cuda.h"

namespace h3rt {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

void compare_with_host(uint64_t seed, uint64_t stream, int64_t offset, int64_t n) {
  float* d = nullptr;
  CUDA_OK(cudaMalloc(&d, n * sizeof(float)));
  CUDA_OK(cudaMemset(d, 0xFF, n * sizeof(float)));  // poison: NaN everywhere
  GaussianNoiseParams p;
  p.seed = seed;
  p.stream = stream;
  p.offset = offset;
  p.out = d;
  p.n = n;
  CUDA_OK(gaussian_noise_cuda(p, nullptr));
  std::vector<float> dev(n), host(n);
  CUDA_OK(cudaMemcpy(dev.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(d));
  gaussian_noise(seed, stream, offset, host.data(), n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(&dev[i], &host[i], 4) != 0 && bad++ < 5)
      ADD_FAILURE() << "seed " << seed << " stream " << stream << " offset " << offset << " value "
                    << i << ": device " << dev[i] << ", host " << host[i];
  EXPECT_EQ(bad, 0) << "values differing in bits out of " << n;
}

TEST(NoiseCuda, MillionValuesBitExactWithHost) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  compare_with_host(1, kVideoNoiseStream, 0, 1 << 20);
  compare_with_host(0xfeedface12345678ull, kAudioNoiseStream, 3, (1 << 20) + 1);
}

TEST(NoiseCuda, PartialBlocksAndLargeCounters) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (int64_t off : {1, 2, 5})
    for (int64_t n : {1, 2, 3, 7}) compare_with_host(77, 0, off, n);
  compare_with_host(77, 5, (int64_t{1} << 34) + 1, 4097);  // block index above 2^32
}

TEST(NoiseCuda, RejectsInvalidArguments) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  GaussianNoiseParams p;
  p.n = 4;
  EXPECT_EQ(gaussian_noise_cuda(p, nullptr), cudaErrorInvalidValue);  // null output
  p.n = 0;
  EXPECT_EQ(gaussian_noise_cuda(p, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace h3rt
