// cuBLASLt matmul with device alpha for the NVFP4 GEMM paths (see lt_matmul.h).
#include <cublasLt.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "cuda/runtime.h"
#include "ops/linear_nvfp4/lt_matmul.h"

#define H3RT_LT_CHECK(expr)                                                             \
  do {                                                                                  \
    cublasStatus_t h3rt_st_ = (expr);                                                   \
    if (h3rt_st_ != CUBLAS_STATUS_SUCCESS)                                              \
      H3RT_FAIL("linear_nvfp4: cuBLASLt error ", cublasLtGetStatusName(h3rt_st_), ": ", \
                cublasLtGetStatusString(h3rt_st_), " in `" #expr "`");                  \
  } while (0)

namespace h3rt::ops::nvfp4_gemm {
namespace {

struct Key {
  int device;
  LtOperands kind;
  int64_t rows, in, out, a_ld, y_ld;
  int align;
  bool bias;
  auto tie() const { return std::tie(device, kind, rows, in, out, a_ld, y_ld, align, bias); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  int pointer_mode = -1;  // -1: no algorithm for this problem
  std::mutex mu;          // pointer attributes are set per call
  void reset() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (op) cublasLtMatmulDescDestroy(op);
    a = b = c = nullptr;
    op = nullptr;
  }
  ~Plan() { reset(); }
};

struct State {
  std::mutex mu;
  std::map<int, cublasLtHandle_t> handles;
  std::map<Key, std::unique_ptr<Plan>> plans;
};

State& state() {
  static State* s = new State();  // never destroyed: handles outlive static teardown
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

Key key_of(const LtMatmul& m) {
  int dev = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  return {dev,
          m.kind,
          m.rows,
          m.in,
          m.out,
          m.a_ld,
          m.y_ld,
          alignment_of({m.w, m.a, m.y, m.bias}),
          m.bias != nullptr};
}

template <typename T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  H3RT_LT_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

// Descriptors for `k` with the given alpha/beta pointer mode; true when the heuristic returns an
// algorithm (stored in `p`).
bool build(Plan& p, const Key& k, cublasLtHandle_t h, int32_t pointer_mode) {
  p.reset();
  const bool fp4 = k.kind == LtOperands::kFp4BlockScaled;
#if CUDART_VERSION >= 12080
  const cudaDataType_t ab = fp4 ? CUDA_R_4F_E2M1 : CUDA_R_16BF;
#else
  if (fp4) return false;
  const cudaDataType_t ab = CUDA_R_16BF;
#endif
  H3RT_LT_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attr(p.op, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(CUBLAS_OP_T));
  set_attr(p.op, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(CUBLAS_OP_N));
  set_attr(p.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, pointer_mode);
  if (k.bias) {
    set_attr(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, int32_t(CUBLASLT_EPILOGUE_BIAS));
    set_attr(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_16BF));
  }
  if (fp4) {
    set_attr(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
             int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3));
    set_attr(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
             int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3));
  }
  H3RT_LT_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab, k.in, k.out, k.in));
  H3RT_LT_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab, k.in, k.rows, k.a_ld));
  H3RT_LT_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16BF, k.out, k.rows, k.y_ld));

  cublasLtMatmulPreference_t pref = nullptr;
  H3RT_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t wsb = kLtWorkspaceBytes;
  const uint32_t al = static_cast<uint32_t>(k.align);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                       sizeof(wsb));
  for (auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t hs =
      cublasLtMatmulAlgoGetHeuristic(h, p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0) return false;
  p.algo = res.algo;
  p.pointer_mode = pointer_mode;
  return true;
}

Plan& get_plan(const Key& k, cublasLtHandle_t* handle) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  auto& h = st.handles[k.device];
  if (!h) H3RT_LT_CHECK(cublasLtCreate(&h));
  *handle = h;
  auto it = st.plans.find(k);
  if (it != st.plans.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  if (!build(*plan, k, h, CUBLASLT_POINTER_MODE_DEVICE) &&
      !build(*plan, k, h, CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO)) {
    plan->reset();
    plan->pointer_mode = -1;
  }
  Plan& ref = *plan;
  st.plans.emplace(k, std::move(plan));
  return ref;
}

}  // namespace

cudaError_t lt_matmul(const LtMatmul& m, cudaStream_t stream) {
  H3RT_CHECK(m.w && m.a && m.y && m.alpha && m.zero && m.lt_workspace,
             "linear_nvfp4: lt_matmul needs w, a, y, alpha, zero and its workspace");
  cublasLtHandle_t h;
  Plan& plan = get_plan(key_of(m), &h);
  if (plan.pointer_mode < 0) return cudaErrorNotSupported;
  std::lock_guard<std::mutex> lock(plan.mu);
  if (m.bias)
    set_attr(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(m.bias));
  if (m.kind == LtOperands::kFp4BlockScaled) {
    // cuBLAS's A is W, so its A scales are the weight scales and its B scales the activations'.
    set_attr(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, m.w_scales);
    set_attr(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, m.a_scales);
  }
  H3RT_LT_CHECK(cublasLtMatmul(h, plan.op, m.alpha, m.w, plan.a, m.a, plan.b, m.zero, m.y, plan.c,
                               m.y, plan.c, &plan.algo, m.lt_workspace, kLtWorkspaceBytes, stream));
  return cudaGetLastError();
}

}  // namespace h3rt::ops::nvfp4_gemm
