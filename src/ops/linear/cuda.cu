// linear on the GPU (declared in linear.h) through cuBLASLt, plus the e4m3 activation quantizer
// of the fp8 path.
//
// Layout: y[rows, out] = x[rows, in] W[out, in]^T, all row-major. cuBLASLt is column-major, so
// we compute y^T = W x^T: A = W viewed as a column-major in x out matrix with op T, B = x viewed
// as in x rows with op N, C = D = y^T (out x rows, ld = y row stride). This "TN" form is also
// the one Hopper's fp8 GEMMs require.
//
// Plans (descriptors, layouts and the heuristic's algorithm) are cached per shape, leading
// dimensions, pointer alignment, options and device; the workspace is per (device, stream) so
// concurrent streams never share one.
#include <cublasLt.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "cuda/device_math.cuh"
#include "cuda/runtime.h"
#include "ops/linear/linear.h"

#define H3RT_CUBLAS_CHECK(expr)                                           \
  do {                                                                    \
    cublasStatus_t h3rt_st_ = (expr);                                     \
    if (h3rt_st_ != CUBLAS_STATUS_SUCCESS)                                \
      H3RT_FAIL("cuBLASLt error ", cublasLtGetStatusName(h3rt_st_), ": ", \
                cublasLtGetStatusString(h3rt_st_), " in `" #expr "`");    \
  } while (0)

namespace h3rt::ops {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

enum class GemmKind : int { bf16 = 0, fp8 = 1 };

struct PlanKey {
  int device;
  GemmKind kind;
  int64_t rows, in, out, ldx, ldy;
  int align;
  bool bias, fast_accum;
  auto tie() const {
    return std::tie(device, kind, rows, in, out, ldx, ldy, align, bias, fast_accum);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::mutex mu;  // the descriptor's pointer attributes are set per call
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

struct LtState {
  std::mutex mu;
  std::map<int, cublasLtHandle_t> handles;
  std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
};

LtState& state() {
  static LtState* s = new LtState();  // never destroyed: handles outlive static teardown
  return *s;
}

int alignment_of(std::initializer_list<const void*> ptrs) {
  int a = 256;
  for (const void* p : ptrs) {
    if (!p) continue;
    const uintptr_t v = reinterpret_cast<uintptr_t>(p);
    while (a > 1 && (v % a) != 0) a >>= 1;
  }
  return a;
}

// Builds (or finds) the plan for `key`; returns it with the handle and the stream's workspace.
Plan& get_plan(const PlanKey& key, cudaStream_t stream, cublasLtHandle_t* handle, void** ws) {
  LtState& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  auto& h = st.handles[key.device];
  if (!h) H3RT_CUBLAS_CHECK(cublasLtCreate(&h));
  *handle = h;
  void*& w = st.workspaces[{key.device, stream}];
  if (!w) H3RT_CUDA_CHECK(cudaMalloc(&w, kWorkspaceBytes));
  *ws = w;
  auto it = st.plans.find(key);
  if (it != st.plans.end()) return *it->second;

  auto plan = std::make_unique<Plan>();
  const bool fp8 = key.kind == GemmKind::fp8;
  const cudaDataType_t ab = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  H3RT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  H3RT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  H3RT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (key.bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    H3RT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    const cudaDataType_t bt = CUDA_R_16BF;
    H3RT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                     &bt, sizeof(bt)));
  }
  if (fp8) {
    const int8_t fa = key.fast_accum ? 1 : 0;
    H3RT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fa, sizeof(fa)));
  }
  H3RT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, ab, key.in, key.out, key.in));
  H3RT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, ab, key.in, key.rows, key.ldx));
  H3RT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, CUDA_R_16BF, key.out, key.rows, key.ldy));

  cublasLtMatmulPreference_t pref = nullptr;
  H3RT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t wsb = kWorkspaceBytes;
  const uint32_t al = static_cast<uint32_t>(key.align);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                       sizeof(wsb));
  for (auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(h, plan->op, plan->a, plan->b, plan->c,
                                                           plan->c, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  H3RT_CHECK(hs == CUBLAS_STATUS_SUCCESS && found > 0, "linear_cuda: cuBLASLt has no ",
             fp8 ? "fp8" : "bf16", " algorithm for rows ", key.rows, ", in ", key.in, ", out ",
             key.out, " (status ", cublasLtGetStatusName(hs), ")");
  plan->algo = res.algo;
  Plan& ref = *plan;
  st.plans.emplace(key, std::move(plan));
  return ref;
}

void run_plan(Plan& plan, cublasLtHandle_t h, void* ws, const void* a, const void* b, void* c,
              const void* bias, const float* a_scale, const float* b_scale, cudaStream_t s) {
  std::lock_guard<std::mutex> lock(plan.mu);
  if (bias)
    H3RT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &bias, sizeof(bias)));
  if (a_scale) {
    H3RT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                     &a_scale, sizeof(a_scale)));
    H3RT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                     &b_scale, sizeof(b_scale)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  H3RT_CUBLAS_CHECK(cublasLtMatmul(h, plan.op, &alpha, a, plan.a, b, plan.b, &beta, c, plan.c, c,
                                   plan.c, &plan.algo, ws, kWorkspaceBytes, s));
}

int current_device() {
  int d = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void check_shapes(const char* what, int64_t rows, int64_t in, int64_t out, int64_t ldx, int64_t ldy,
                  const void* x, const void* w, const void* y) {
  H3RT_CHECK(x && w && y && rows >= 0 && in > 0 && out > 0, what, ": bad params");
  H3RT_CHECK(ldx >= in && ldy >= out, what, ": row strides (x ", ldx, ", y ", ldy,
             ") smaller than in ", in, " / out ", out);
}

}  // namespace

cudaError_t linear_bf16_cuda(const LinearCudaParams& in, cudaStream_t stream) {
  LinearCudaParams p = in;
  if (!p.x_row_stride) p.x_row_stride = p.in;
  if (!p.y_row_stride) p.y_row_stride = p.out;
  check_shapes("linear_bf16_cuda", p.rows, p.in, p.out, p.x_row_stride, p.y_row_stride, p.x, p.w,
               p.y);
  if (p.rows == 0) return cudaSuccess;
  const PlanKey key{current_device(),
                    GemmKind::bf16,
                    p.rows,
                    p.in,
                    p.out,
                    p.x_row_stride,
                    p.y_row_stride,
                    alignment_of({p.x, p.w, p.y, p.bias}),
                    p.bias != nullptr,
                    false};
  cublasLtHandle_t h;
  void* ws;
  Plan& plan = get_plan(key, stream, &h, &ws);
  run_plan(plan, h, ws, p.w, p.x, p.y, p.bias, nullptr, nullptr, stream);
  return cudaGetLastError();
}

cudaError_t linear_fp8_cuda(const LinearFp8CudaParams& in, cudaStream_t stream) {
  LinearFp8CudaParams p = in;
  if (!p.x_row_stride) p.x_row_stride = p.in;
  if (!p.y_row_stride) p.y_row_stride = p.out;
  check_shapes("linear_fp8_cuda", p.rows, p.in, p.out, p.x_row_stride, p.y_row_stride, p.x, p.w,
               p.y);
  H3RT_CHECK(p.x_scale && p.w_scale, "linear_fp8_cuda: x_scale and w_scale are required");
  H3RT_CHECK(p.in % 16 == 0 && p.x_row_stride % 16 == 0, "linear_fp8_cuda: in ", p.in,
             " and the x row stride must be multiples of 16 (fp8 GEMM constraint)");
  if (p.rows == 0) return cudaSuccess;
  const PlanKey key{current_device(),
                    GemmKind::fp8,
                    p.rows,
                    p.in,
                    p.out,
                    p.x_row_stride,
                    p.y_row_stride,
                    alignment_of({p.x, p.w, p.y, p.bias}),
                    p.bias != nullptr,
                    p.fast_accum};
  cublasLtHandle_t h;
  void* ws;
  Plan& plan = get_plan(key, stream, &h, &ws);
  // cuBLASLt's A is W, so its A scale is the weight scale and its B scale the input scale.
  run_plan(plan, h, ws, p.w, p.x, p.y, p.bias, p.w_scale, p.x_scale, stream);
  return cudaGetLastError();
}

namespace {

__global__ void quantize_e4m3_kernel(QuantizeE4m3CudaParams p) {
  const int64_t row = blockIdx.x;
  const int nvec = static_cast<int>(p.cols / 8);
  const float s = *p.scale;
  const __nv_bfloat16* xr = p.x + row * p.x_row_stride;
  __nv_fp8_e4m3* qr = p.q + row * p.q_row_stride;
  for (int c = threadIdx.x; c < nvec; c += blockDim.x) {
    float f[8];
    cuda::unpack8(cuda::load8(xr + c * 8), f);
    uint16_t pairs[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      pairs[i] =
          __nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(f[2 * i], s), __fdiv_rn(f[2 * i + 1], s)),
                                   __NV_SATFINITE, __NV_E4M3);
    uint2 out;
    out.x = pairs[0] | (uint32_t(pairs[1]) << 16);
    out.y = pairs[2] | (uint32_t(pairs[3]) << 16);
    *reinterpret_cast<uint2*>(qr + c * 8) = out;
  }
}

}  // namespace

cudaError_t quantize_e4m3_cuda(const QuantizeE4m3CudaParams& in, cudaStream_t stream) {
  QuantizeE4m3CudaParams p = in;
  if (!p.x_row_stride) p.x_row_stride = p.cols;
  if (!p.q_row_stride) p.q_row_stride = p.cols;
  H3RT_CHECK(p.x && p.q && p.scale && p.rows >= 0 && p.cols > 0, "quantize_e4m3_cuda: bad params");
  H3RT_CHECK(p.cols % 8 == 0 && p.x_row_stride % 8 == 0 && p.q_row_stride % 8 == 0,
             "quantize_e4m3_cuda: cols and row strides must be multiples of 8");
  H3RT_CHECK(
      reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.q) % 8 == 0,
      "quantize_e4m3_cuda: x must be 16-byte and q 8-byte aligned");
  if (p.rows == 0) return cudaSuccess;
  const int nvec = static_cast<int>(p.cols / 8);
  const int threads = std::min(256, (nvec + 31) / 32 * 32);
  quantize_e4m3_kernel<<<static_cast<unsigned>(p.rows), threads, 0, stream>>>(p);
  return H3RT_LAUNCH_CHECK("quantize_e4m3");
}

}  // namespace h3rt::ops
