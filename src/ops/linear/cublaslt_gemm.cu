// cuBLASLt GEMMs with cached plans (see cublaslt_gemm.h).
#include <cublasLt.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/env.h"
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
  int algo;
  bool listed;
  auto tie() const {
    return std::tie(device, kind, rows, in, out, x_ld, y_ld, align, bias, device_alpha, fast_accum,
                    algo, listed);
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

// Descriptors for `k` in the given pointer mode and up to `count` of the heuristic's algorithms,
// best first (none: the problem has no algorithm in this mode).
std::vector<cublasLtMatmulHeuristicResult_t> describe(Plan& p, const Key& k, cublasLtHandle_t h,
                                                      int32_t pointer_mode, int count) {
  p.reset();
  cudaDataType_t ab;
  if (!operand_type(k.kind, &ab)) return {};
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
  std::vector<cublasLtMatmulHeuristicResult_t> res(static_cast<size_t>(count));
  int found = 0;
  const cublasStatus_t hs =
      cublasLtMatmulAlgoGetHeuristic(h, p.op, p.a, p.b, p.c, p.c, pref, count, res.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  res.resize(hs == CUBLAS_STATUS_SUCCESS ? static_cast<size_t>(found) : 0);
  return res;
}

AlgoInfo info_of(const cublasLtMatmulAlgo_t& algo);

// A configuration that runs instead of the heuristic's first for one GEMM shape on one GPU:
// measured faster in two `h3rt bench gemm-algos` samples (bench/RESULTS.md session 19), all with
// split-K 1 (one fp32 accumulation, as the first). rows in [min_rows, max_rows].
struct Preferred {
  const char* gpu;  // a part of cudaDeviceProp::name
  Operands kind;
  int64_t out, in, min_rows, max_rows;
  int tile, stages, cluster;
};
constexpr int64_t kAnyRows = int64_t(1) << 40;
constexpr Preferred kPreferred[] = {
    // H100 80GB HBM3 (bench gemm-algos with a bias epilogue, session 19; bench/RESULTS.md), the
    // seed shape: fc1 fp8 9.62 / 9.68 ms against 11.10 / 10.35; bf16 qkv 12.08 / 11.97 against
    // 13.16 / 12.55, out 3.98 / 3.82 against 4.28 / 4.35, fc2 8.16 / 8.15 against 8.91 / 8.89;
    // 864x480: bf16 fc1 6.65 / 6.65 against 7.08 / 7.11. In the block (no bias; session 20, list
    // on / off): bf16 qkv 11.05 / 11.15, out 3.57 / 3.62, fc2 7.10 / 7.17, fc1 at 864x480 5.91 /
    // 5.99 ms; fp8 fc1 7.906 / 7.907 (no effect). To be re-swept bias-free.
    {"H100", Operands::kFp8, 28672, 5376, 20000, kAnyRows, 403, 36, 5},
    {"H100", Operands::kBf16, 21504, 5376, 20000, kAnyRows, 209, 35, 3},
    {"H100", Operands::kBf16, 5376, 7168, 20000, kAnyRows, 499, 35, 5},
    {"H100", Operands::kBf16, 5376, 14336, 20000, kAnyRows, 499, 35, 5},
    {"H100", Operands::kBf16, 28672, 5376, 10000, 19999, 419, 35, 3},
};

// The preferred configuration for k, or null: none listed, or H3RT_CUBLASLT_TABLE=0 (the
// heuristic's first everywhere, for side-by-side runs).
const Preferred* preferred_for(const Key& k) {
  if (!env_switch("H3RT_CUBLASLT_TABLE", true)) return nullptr;
  const std::string& name = cuda::device_name(k.device);
  for (const Preferred& q : kPreferred)
    if (q.kind == k.kind && q.out == k.out && q.in == k.in && k.rows >= q.min_rows &&
        k.rows <= q.max_rows && name.find(q.gpu) != std::string::npos)
      return &q;
  return nullptr;
}

// The plan for `k` in the given pointer mode. h3rt's pick (algo 0, not listed): the preferred
// configuration where one is listed for k and the heuristic offers it, else the heuristic's
// first from a request for one algorithm, as h3rt always had. Otherwise index k.algo of a request
// for kMaxAlgos, as algos() makes it, so that index i names the same algorithm in both
// (whatever the heuristic does with shorter requests).
bool build(Plan& p, const Key& k, cublasLtHandle_t h, int32_t pointer_mode) {
  const bool pick = k.algo == 0 && !k.listed;
  if (pick) {
    if (const Preferred* q = preferred_for(k)) {
      for (const auto& r : describe(p, k, h, pointer_mode, kMaxAlgos)) {
        const AlgoInfo a = info_of(r.algo);
        if (a.tile == q->tile && a.stages == q->stages && a.cluster == q->cluster &&
            a.split_k <= 1 && a.reduction == 0) {
          p.algo = r.algo;
          p.found = true;
          return true;
        }
      }
    }
  }
  const std::vector<cublasLtMatmulHeuristicResult_t> res =
      describe(p, k, h, pointer_mode, pick ? 1 : kMaxAlgos);
  if (static_cast<int>(res.size()) <= k.algo) return false;
  p.algo = res[static_cast<size_t>(k.algo)].algo;
  p.found = true;
  return true;
}

// The pointer modes a plan tries, in order (device alpha: DEVICE, then the vector mode).
std::vector<int32_t> pointer_modes(const Key& k) {
  if (!k.device_alpha) return {CUBLASLT_POINTER_MODE_HOST};
  return {CUBLASLT_POINTER_MODE_DEVICE, CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO};
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
  for (int32_t mode : pointer_modes(k))
    if (build(*plan, k, dev->handle, mode)) break;
  Plan& ref = *plan;
  st.plans.emplace(k, std::move(plan));
  return ref;
}

void* output_of(const Gemm& g) {
  return g.kind == Operands::kInt8 ? static_cast<void*>(g.y_i32) : static_cast<void*>(g.y);
}

Key key_of(const Gemm& g) {
  int device = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&device));
  H3RT_CHECK(g.algo >= 0 && g.algo < kMaxAlgos, "cuBLASLt GEMM: algo ", g.algo,
             " out of range [0, ", kMaxAlgos, ")");
  return {device,
          g.kind,
          g.rows,
          g.in,
          g.out,
          g.x_ld,
          g.y_ld,
          alignment_of({g.w, g.x, output_of(g), g.bias}),
          g.bias != nullptr,
          g.alpha != nullptr,
          g.kind == Operands::kFp8 && g.fast_accum,
          g.algo,
          g.listed};
}

// The value of one attribute of an algorithm's configuration (0 where it has none).
uint64_t config_value(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  size_t size = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&a, attr, nullptr, 0, &size) != CUBLAS_STATUS_SUCCESS ||
      size == 0 || size > sizeof(uint64_t))
    return 0;
  uint64_t v = 0;  // little endian: the attribute's bytes are its low bytes
  if (cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, size, &size) != CUBLAS_STATUS_SUCCESS)
    return 0;
  return v;
}

AlgoInfo info_of(const cublasLtMatmulAlgo_t& algo) {
  AlgoInfo a;
  a.id = static_cast<int>(config_value(algo, CUBLASLT_ALGO_CONFIG_ID));
  a.tile = static_cast<int>(config_value(algo, CUBLASLT_ALGO_CONFIG_TILE_ID));
  a.stages = static_cast<int>(config_value(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID));
  a.split_k = static_cast<int>(config_value(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM));
  a.reduction = static_cast<int>(config_value(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME));
  a.swizzle = static_cast<int>(config_value(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING));
  a.cluster = static_cast<int>(config_value(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
  a.custom = static_cast<int>(config_value(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION));
  return a;
}

}  // namespace

std::vector<AlgoInfo> algos(const Gemm& g, int max) {
  H3RT_CHECK(max >= 1 && max <= kMaxAlgos, "cuBLASLt algos: max ", max, " out of [1, ", kMaxAlgos,
             "]");
  Gemm one = g;
  one.algo = 0;
  const Key k = key_of(one);
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  PerDevice& dev = device_state(st, k.device);
  Plan p;
  std::vector<cublasLtMatmulHeuristicResult_t> res;
  for (int32_t mode : pointer_modes(k))
    if (!(res = describe(p, k, dev.handle, mode, kMaxAlgos)).empty()) break;
  if (static_cast<int>(res.size()) > max) res.resize(static_cast<size_t>(max));
  std::vector<AlgoInfo> out;
  for (const auto& r : res) {
    AlgoInfo a = info_of(r.algo);
    a.workspace_bytes = r.workspaceSize;
    a.waves = r.wavesCount;
    out.push_back(a);
  }
  return out;
}

AlgoInfo algo_of(const Gemm& g) {
  const Key k = key_of(g);
  PerDevice dev;
  void* ws = g.workspace;
  Plan& plan = get_plan(k, nullptr, &dev, &ws);
  H3RT_CHECK(plan.found, "cuBLASLt: no algorithm ", g.algo, " for rows ", g.rows, ", in ", g.in,
             ", out ", g.out);
  return info_of(plan.algo);
}

cudaError_t gemm(const Gemm& g, cudaStream_t stream) {
  const bool i8 = g.kind == Operands::kInt8;
  void* const out = output_of(g);
  H3RT_CHECK(g.w && g.x && out && g.rows >= 0 && g.in > 0 && g.out > 0,
             "cuBLASLt GEMM: bad params");
  H3RT_CHECK(g.kind == Operands::kBf16 || i8 || (g.w_scale && g.x_scale),
             "cuBLASLt GEMM: scaled operands need both scales");
  H3RT_CHECK(!i8 || (!g.bias && !g.alpha), "cuBLASLt GEMM: int8 takes no bias or alpha");
  if (g.rows == 0) return cudaSuccess;
  const Key k = key_of(g);
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
