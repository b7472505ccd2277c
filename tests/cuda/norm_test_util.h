// The modulated RMSNorm parameters of the fused-producer GPU tests (NVFP4 and int8 outputs): one
// weight row, a table of `tables` rows each of shift, scale and gate (in that order), per-row
// table indices, and optionally the gated residual.
#pragma once

#include "cuda_test_util.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"

namespace h3rt::test {

inline ops::RmsNormModulateCudaParams modulated_norm_params(const Tensor& weight,
                                                            const Tensor& table,
                                                            const Tensor& row_index,
                                                            const Tensor* residual, int64_t rows,
                                                            int64_t dim, int64_t tables) {
  ops::RmsNormModulateCudaParams p;
  p.weight = dptr<__nv_bfloat16>(weight);
  p.shift = dptr<__nv_bfloat16>(table);
  p.scale = p.shift + tables * dim;
  p.row_table_index = dptr<int64_t>(row_index);
  p.table_row_stride = dim;
  p.rows = rows;
  p.dim = dim;
  p.eps = 1e-6f;
  if (residual) {
    p.residual = dptr<__nv_bfloat16>(*residual);
    p.residual_gate = p.shift + 2 * tables * dim;
  }
  return p;
}

}  // namespace h3rt::test
