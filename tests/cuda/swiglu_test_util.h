// The silu table the swiglu table path reads, built on the GPU (shared by the swiglu tests).
#pragma once

#include <cstdlib>

#include "cuda_test_util.h"
#include "ops/swiglu/swiglu.h"

namespace h3rt::test {

// round_bf16(silu(g)) for every bf16 g, as swiglu_cpu computes it, on the GPU.
inline Tensor silu_table_on_gpu() {
  Tensor t = device_buffer(DType::bf16, {ops::kSiluTableEntries});
  H3RT_CUDA_CHECK(ops::swiglu_silu_table_cuda(dptr<__nv_bfloat16>(t), nullptr));
  return t;
}

// H3RT_SWIGLU_TABLE=compact while in scope (unset again however the scope is left): the table path
// loads the compact table wherever it runs, as on the GPUs with 99 KB per block (sm_120 / sm_121).
struct ForcedCompactSiluTable {
  ForcedCompactSiluTable() { setenv("H3RT_SWIGLU_TABLE", "compact", 1); }
  ~ForcedCompactSiluTable() { unsetenv("H3RT_SWIGLU_TABLE"); }
  ForcedCompactSiluTable(const ForcedCompactSiluTable&) = delete;
  ForcedCompactSiluTable& operator=(const ForcedCompactSiluTable&) = delete;
};

}  // namespace h3rt::test
