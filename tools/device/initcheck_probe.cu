// Does compute-sanitizer's initcheck see the writes of cuBLASLt's Hopper GEMM kernels?
// Writes D = A * B^T (bf16, cuBLASLt) into never-initialized memory, then reads D with a plain
// kernel and checks every value against a host computation. Run under
// `compute-sanitizer --tool initcheck`: reports at the reading kernel while the values are right
// mean the tool missed the GEMM's stores (an artefact), not that the memory was uninitialized.
// Control: the same read of memory a plain kernel wrote. Build on the GPU machine:
//   nvcc -O2 -arch=sm_90a tools/device/initcheck_probe.cu -lcublasLt -o /tmp/initcheck_probe
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <vector>

#define CK(x) do { auto e_ = (x); if (e_ != 0) { std::printf("fail %s: %d\n", #x, int(e_)); return 2; } } while (0)

__global__ void sum_rows(const __nv_bfloat16* d, int n, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __bfloat162float(d[i]);
}
__global__ void fill(__nv_bfloat16* d, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) d[i] = __float2bfloat16(float(i % 7));
}

int main(int argc, char** argv) {
  const int M = argc > 1 ? std::atoi(argv[1]) : 300, N = 384, K = 256;
  std::vector<__nv_bfloat16> a(M * K), b(N * K);
  for (int i = 0; i < M * K; ++i) a[i] = __float2bfloat16(float((i * 37) % 11 - 5) / 8);
  for (int i = 0; i < N * K; ++i) b[i] = __float2bfloat16(float((i * 53) % 13 - 6) / 8);
  __nv_bfloat16 *da, *db, *dd, *dc;
  float* dout;
  CK(cudaMalloc(&da, a.size() * 2));
  CK(cudaMalloc(&db, b.size() * 2));
  CK(cudaMalloc(&dd, size_t(M) * N * 2));
  CK(cudaMalloc(&dc, size_t(M) * N * 2));
  CK(cudaMalloc(&dout, size_t(M) * N * 4));
  CK(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t op;
  CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
  CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
  CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt));
  // Column-major view: D^T [N, M] = B [N, K] * A^T [K, M].
  cublasLtMatrixLayout_t lb, la, ld;
  CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, N, K));
  CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, M, K));
  CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, N, M, N));
  float one = 1, zero = 0;
  CK(cublasLtMatmul(lt, op, &one, db, lb, da, la, &zero, dd, ld, dd, ld, nullptr, nullptr, 0, 0));
  sum_rows<<<(M * N + 255) / 256, 256>>>(dd, M * N, dout);
  std::vector<float> got(size_t(M) * N);
  CK(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k)
        s += double(__bfloat162float(a[m * K + k])) * __bfloat162float(b[n * K + k]);
      if (std::fabs(got[size_t(m) * N + n] - s) > 0.02 * std::fabs(s) + 0.02) ++bad;
    }
  std::printf("cublasLt D read back by a kernel: %d of %d values wrong (M=%d)\n", bad, M * N, M);
  fill<<<(M * N + 255) / 256, 256>>>(dc, M * N);
  sum_rows<<<(M * N + 255) / 256, 256>>>(dc, M * N, dout);
  CK(cudaDeviceSynchronize());
  std::printf("control: kernel-written buffer read back\n");
  return bad ? 1 : 0;
}
