// The modulated RMSNorm parameters of the fused-producer GPU tests (NVFP4 and int8 outputs): one
// weight row, a table of `tables` rows each of shift, scale and gate (in that order), per-row
// table indices, and optionally the gated residual.
#pragma once

#include <random>
#include <vector>

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

// Random bf16 device rows [rows, cols] of standard deviation sd.
inline Tensor random_device_bf16(int64_t rows, int64_t cols, std::mt19937_64& g, float sd) {
  return upload(random_bf16(size_t(rows * cols), g, 0.0f, sd).bits, DType::bf16, {rows, cols});
}

// The inputs of a fused-producer norm test on fresh random data: x twice (the reference and the
// fused run each update their own with the fused residual), the residual, a table of 3 rows each
// of shift, scale and gate, a weight row, and per-row table indices derived from the seed.
struct NormInputs {
  static constexpr int64_t kTables = 3;
  int64_t rows, dim;
  Tensor x_ref, x_fused, res, tab, w, idx;
  NormInputs(const std::vector<uint16_t>& x, int64_t rows_, int64_t dim_, std::mt19937_64& g,
             uint64_t seed)
      : rows(rows_),
        dim(dim_),
        x_ref(upload(x, DType::bf16, {rows_, dim_})),
        x_fused(upload(x, DType::bf16, {rows_, dim_})),
        res(random_device_bf16(rows_, dim_, g, 2.0f)),
        tab(random_device_bf16(3 * kTables, dim_, g, 0.5f)),
        w(random_device_bf16(1, dim_, g, 1.5f)) {
    std::vector<int64_t> ix(rows);
    for (int64_t r = 0; r < rows; ++r) ix[r] = (r * 7 + int64_t(seed % 5)) % kTables;
    idx = upload(ix, DType::i64, {rows});
  }
  // The modulated norm of these rows (x not set), with the gated residual when `residual`.
  ops::RmsNormModulateCudaParams params(bool residual) const {
    return modulated_norm_params(w, tab, idx, residual ? &res : nullptr, rows, dim, kTables);
  }
};

}  // namespace h3rt::test
