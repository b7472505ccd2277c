// Throughput probe: exp2 values per clock per SM of MUFU.EX2 in f32, f16 and bf16. On sm_90 the
// packed forms (ex2.approx.f16x2 / .bf16x2) issue two MUFU ops per pair (cuobjdump), so they could
// only help the Sage softmax if each such op ran faster than the f32 one: an H100 measured 16.00
// values per clock per SM for all three (bench/RESULTS.md session 22), so they do not.
// One CTA of 1024 threads per SM, 8 independent chains per thread; cycles from clock64 around
// the loop. On the device: nvcc -arch=sm_90a -O3 -o /tmp/mufu tools/device/mufu_ex2_rate.cu &&
// /tmp/mufu
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

template <int kForm>
__global__ void probe(uint32_t* sink, long long* cycles, int iters, uint32_t seed) {
  uint32_t v[8];
  for (int c = 0; c < 8; ++c) v[c] = seed ^ (threadIdx.x * 8 + c);
  __syncthreads();
  const long long t0 = clock64();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      if constexpr (kForm == 0) {
        asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+r"(v[c]));
      } else if constexpr (kForm == 1) {
        asm volatile("ex2.approx.f16x2 %0, %0;" : "+r"(v[c]));
      } else {
        asm volatile("ex2.approx.ftz.bf16x2 %0, %0;" : "+r"(v[c]));
      }
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  uint32_t s = 0;
  for (int c = 0; c < 8; ++c) s ^= v[c];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <int kForm>
void run(const char* name, int values_per_op, int sms) {
  const int threads = 1024, iters = 4096;
  uint32_t* sink;
  long long* cycles;
  cudaMalloc(&sink, sizeof(uint32_t) * threads * sms);
  cudaMalloc(&cycles, sizeof(long long) * sms);
  probe<kForm><<<sms, threads>>>(sink, cycles, iters, 0x3f800000u);  // warm-up
  probe<kForm><<<sms, threads>>>(sink, cycles, iters, 0x3f000000u);
  long long c0 = 0;
  cudaMemcpy(&c0, cycles, sizeof(c0), cudaMemcpyDeviceToHost);
  const double values = double(threads) * iters * 8 * values_per_op;
  std::printf("%-28s %8.2f exp2 values per clock per SM (%lld cycles)\n", name, values / c0, c0);
  cudaFree(sink);
  cudaFree(cycles);
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  run<0>("ex2.approx.ftz.f32", 1, sms);
  run<1>("ex2.approx.f16x2", 2, sms);
  run<2>("ex2.approx.ftz.bf16x2", 2, sms);
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
