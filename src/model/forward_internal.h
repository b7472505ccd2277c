// Internal pieces of the CPU reference forward: the run context and the sublayers, each a
// short composition of ops (src/ops/*), in README section 5 order.
#pragma once

#include <string>
#include <vector>

#include "h3rt/model.h"
#include "ops/attention/attention.h"

namespace h3rt::model {

struct Ctx {
  const H3Config& config;
  Precision precision;
  const Probe* probe;

  bool bf16() const { return precision == Precision::bf16; }
  bool probing() const { return probe != nullptr && *probe; }
  void emit(const std::string& name, const float* data, const Shape& shape) const {
    if (probing()) (*probe)(name, data, shape);
  }
};

// y = x W^T + b over `rows` rows; rounded to bf16 when `round_bf16`. Quantized layers first
// quantize-dequantize x as their format's activation path does (linear_cpu.cpp).
FloatVec apply_linear(const LinearWeight& lw, const float* x, int64_t rows, bool round_bf16);

// Rotary tables [S, R] for the packed rows.
struct RopeTables {
  FloatVec cos, sin;
};

// Per-row AdaLN table: row `rows[r]` of `table` (row stride `row_stride`) modulates row r.
struct ModTable {
  const float* table = nullptr;
  int64_t row_stride = 0;
  const int64_t* rows = nullptr;
  const float* chunk(int64_t c, int64_t hidden) const { return table + c * hidden; }
};

// Block-sparse attention of one block (h3rt/sparse.h): the router runs on the q/k after RoPE
// with query tiles of kCpuSparseTile rows; what it computed is added to `stats` (optional).
// With `check`, its dense heads of block `block` route every key block, and a checking forward
// measures this block's sample (h3rt/hybrid.h SparseCheck).
struct SparseRun {
  static constexpr int64_t kCpuSparseTile = 64;  // the w4 kernel's tile (sm_120/121 builds)
  const SparseAttention* cfg = nullptr;
  int64_t prefix_rows = 0;
  SparseStats* stats = nullptr;
  SparseCheck* check = nullptr;
  int64_t block = 0;
};

// The sparse check's statistic (h3rt/hybrid.h) of one sparse attention call `p` (p.out holds
// its output): the rows of `tiles` (q_tile rows each) recomputed without the block list (the
// bits a dense call gives those rows); per head h, diff[h] = sum |sparse - dense| and
// ref[h] = sum |dense| over those rows and head h's channels, in double.
void sparse_check_sums(ops::AttentionParams p, const std::vector<int64_t>& tiles, int64_t q_tile,
                       double* diff, double* ref);

// out_proj(attention(rope(qk_norm(qkv_proj(n))))) over all `rows` rows; no RoPE when `rope` is
// null. Emits q_norm, k_norm, q_rope, k_rope and attn_out under `prefix` when it is non-empty.
// With `sparse`, the attention is restricted to the routed key blocks.
FloatVec attention_sublayer(const Ctx& ctx, const AttentionWeights& w, const float* n, int64_t rows,
                            const RopeTables* rope, const std::string& prefix,
                            const SparseRun* sparse = nullptr);

// fc2(silu(gate) * value) with [gate | value] = fc1(n).
FloatVec mlp_sublayer(const Ctx& ctx, const MlpWeights& w, const float* n, int64_t rows);

// One token-refiner block on the text rows t [L, H]: no modulation, no RoPE.
void refiner_block(const Ctx& ctx, const RefinerBlockWeights& w, FloatVec& t, int64_t rows);

// One transformer block on the packed rows x [S, H], in place. `silu_temb` [M, Tm] is the AdaLN
// linear input (already cast to bf16 in bf16 mode); `adaln_rows` [S] picks each row's table row.
void transformer_block(const Ctx& ctx, const BlockWeights& w, int64_t index, FloatVec& x,
                       const FloatVec& silu_temb, int64_t num_timesteps, const int64_t* adaln_rows,
                       const RopeTables& rope, const SparseRun* sparse = nullptr);

}  // namespace h3rt::model
