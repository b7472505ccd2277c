// cuBLASLt GEMMs with cached plans (see cublaslt_gemm.h).
#include <cublasLt.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "cuda/runtime.h"
#include "ops/linear/cublaslt_gemm.h"

#define H3RT_CUBLASLT_CHECK(expr)                                         \
  do {                                                                    \
    cublasStatus_t h3rt_st_ = (expr);                                     \
    if (h3rt_st_ != CUBLAS_STATUS_SUCCESS)                                \
      H3RT_FAIL("cuBLASLt error ", cublasLtGetStatusName(h3rt_st_), ": ", \
                cublasLtGetStatusString(h3rt_st_), " in `" #expr "`");    \
  } while (0)

namespace h3rt::ops::lt {
namespace {

struct Key {
  int device;
  Operands kind;
  int64_t rows, in, out, x_ld, y_ld;
  int align;
  bool bias, device_alpha, fast_accum;
  auto tie() const {
    return std::tie(device, kind, rows, in, out, x_ld, y_ld, align, bias, device_alpha, fast_accum);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
  std::mutex mu;  // the descriptor's pointer attributes are set per call
  void reset() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (op) cublasLtMatmulDescDestroy(op);
    a = b = c = nullptr;
    op = nullptr;
    found = false;
  }
  ~Plan() { reset(); }
};

struct PerDevice {
  cublasLtHandle_t handle = nullptr;
  float* zero = nullptr;  // beta in device pointer mode
};

struct State {
  std::mutex mu;
  std::map<int, PerDevice> devices;
  std::map<std::pair<int, cudaStream_t>, void*> workspaces;
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

template <typename T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  H3RT_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

bool operand_type(Operands kind, cudaDataType_t* t) {
  switch (kind) {
    case Operands::kBf16:
      *t = CUDA_R_16BF;
      return true;
    case Operands::kFp8:
      *t = CUDA_R_8F_E4M3;
      return true;
    case Operands::kInt8:
      *t = CUDA_R_8I;
      return true;
    case Operands::kFp4BlockScaled:
#if CUDART_VERSION >= 12080
      *t = CUDA_R_4F_E2M1;
      return true;
#else
      return false;
#endif
  }
  return false;
}

// Descriptors for `k` in the given pointer mode; true when the heuristic returns an algorithm.
bool build(Plan& p, const Key& k, cublasLtHandle_t h, int32_t pointer_mode) {
  p.reset();
  cudaDataType_t ab;
  if (!operand_type(k.kind, &ab)) return false;
  const bool i8 = k.kind == Operands::kInt8;
  H3RT_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&p.op, i8 ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F,
                                               i8 ? CUDA_R_32I : CUDA_R_32F));
  set_attr(p.op, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(CUBLAS_OP_T));
  set_attr(p.op, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(CUBLAS_OP_N));
  set_attr(p.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, pointer_mode);
  if (k.bias) {
    set_attr(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, int32_t(CUBLASLT_EPILOGUE_BIAS));
    set_attr(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_16BF));
  }
  if (k.kind == Operands::kFp8)
    set_attr(p.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t(k.fast_accum));
  if (k.kind == Operands::kFp4BlockScaled) {
    set_attr(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
             int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3));
    set_attr(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
             int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3));
  }
  H3RT_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab, k.in, k.out, k.in));
  H3RT_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab, k.in, k.rows, k.x_ld));
  H3RT_CUBLASLT_CHECK(
      cublasLtMatrixLayoutCreate(&p.c, i8 ? CUDA_R_32I : CUDA_R_16BF, k.out, k.rows, k.y_ld));

  cublasLtMatmulPreference_t pref = nullptr;
  H3RT_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t wsb = kWorkspaceBytes;
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
  p.found = true;
  return true;
}

PerDevice& device_state(State& st, int device) {
  PerDevice& d = st.devices[device];
  if (!d.handle) {
    H3RT_CUBLASLT_CHECK(cublasLtCreate(&d.handle));
    H3RT_CUDA_CHECK(cudaMalloc(&d.zero, sizeof(float)));
    H3RT_CUDA_CHECK(cudaMemset(d.zero, 0, sizeof(float)));
  }
  return d;
}

// The plan for `k` (built on first use), the device's handle and zero, and the workspace.
Plan& get_plan(const Key& k, cudaStream_t stream, PerDevice* dev, void** ws) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  *dev = device_state(st, k.device);
  if (!*ws) {
    void*& w = st.workspaces[{k.device, stream}];
    if (!w) H3RT_CUDA_CHECK(cudaMalloc(&w, kWorkspaceBytes));
    *ws = w;
  }
  auto it = st.plans.find(k);
  if (it != st.plans.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  if (!k.device_alpha)
    build(*plan, k, dev->handle, CUBLASLT_POINTER_MODE_HOST);
  else if (!build(*plan, k, dev->handle, CUBLASLT_POINTER_MODE_DEVICE))
    build(*plan, k, dev->handle, CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO);
  Plan& ref = *plan;
  st.plans.emplace(k, std::move(plan));
  return ref;
}

}  // namespace

cudaError_t gemm(const Gemm& g, cudaStream_t stream) {
  const bool i8 = g.kind == Operands::kInt8;
  void* const out = i8 ? static_cast<void*>(g.y_i32) : static_cast<void*>(g.y);
  H3RT_CHECK(g.w && g.x && out && g.rows >= 0 && g.in > 0 && g.out > 0,
             "cuBLASLt GEMM: bad params");
  H3RT_CHECK(g.kind == Operands::kBf16 || i8 || (g.w_scale && g.x_scale),
             "cuBLASLt GEMM: scaled operands need both scales");
  H3RT_CHECK(!i8 || (!g.bias && !g.alpha), "cuBLASLt GEMM: int8 takes no bias or alpha");
  if (g.rows == 0) return cudaSuccess;
  int device = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&device));
  const Key k{device,
              g.kind,
              g.rows,
              g.in,
              g.out,
              g.x_ld,
              g.y_ld,
              alignment_of({g.w, g.x, out, g.bias}),
              g.bias != nullptr,
              g.alpha != nullptr,
              g.kind == Operands::kFp8 && g.fast_accum};
  PerDevice dev;
  void* ws = g.workspace;
  Plan& plan = get_plan(k, stream, &dev, &ws);
  if (!plan.found) return cudaErrorNotSupported;
  std::lock_guard<std::mutex> lock(plan.mu);
  if (g.bias)
    set_attr(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(g.bias));
  if (g.kind != Operands::kBf16 && !i8) {
    // cuBLAS's A is W, so its A scale is the weight's and its B scale the activation's.
    set_attr(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, g.w_scale);
    set_attr(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, g.x_scale);
  }
  const float one = 1.0f, zero = 0.0f;
  const int32_t one_i = 1, zero_i = 0;  // kInt8: scale type int32
  const void* alpha = i8        ? static_cast<const void*>(&one_i)
                      : g.alpha ? static_cast<const void*>(g.alpha)
                                : &one;
  const void* beta = i8        ? static_cast<const void*>(&zero_i)
                     : g.alpha ? static_cast<const void*>(dev.zero)
                               : &zero;
  H3RT_CUBLASLT_CHECK(cublasLtMatmul(dev.handle, plan.op, alpha, g.w, plan.a, g.x, plan.b, beta,
                                     out, plan.c, out, plan.c, &plan.algo, ws, kWorkspaceBytes,
                                     stream));
  return cudaGetLastError();
}

}  // namespace h3rt::ops::lt
