// Attention and MLP sublayers, the token-refiner block and the transformer block.
#include <algorithm>
#include <cmath>
#include <string>

#include "model/forward_internal.h"
#include "ops/attention/attention.h"
#include "ops/attention_sparse/router.h"
#include "ops/gated_residual/gated_residual.h"
#include "ops/qk_norm_rope/qk_norm_rope.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"
#include "ops/swiglu/swiglu.h"

namespace h3rt::model {

namespace {

// Copies the column block [col, col + I) of a [rows, stride] buffer, for probes.
FloatVec columns(const FloatVec& buf, int64_t rows, int64_t stride, int64_t col, int64_t width) {
  FloatVec out(rows * width);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j) out[r * width + j] = buf[r * stride + col + j];
  return out;
}

// The sparse check of this block (h3rt/hybrid.h): this step's sample, its sums, the record.
void check_sparse_block(const SparseRun& sparse, const ops::AttentionParams& p) {
  SparseCheck& check = *sparse.check;
  const int64_t tile = SparseRun::kCpuSparseTile, nq = (p.rows + tile - 1) / tile;
  const std::vector<int64_t> tiles =
      check.tiles(sparse.block, sparse_check_first_tile(*sparse.cfg, sparse.prefix_rows, tile), nq);
  if (tiles.empty()) return;  // no routed tile: nothing to measure
  std::vector<double> diff(p.heads), ref(p.heads);
  sparse_check_sums(p, tiles, tile, diff.data(), ref.data());
  check.record(sparse.block, static_cast<int>(tiles.size()), diff.data(), ref.data());
}

}  // namespace

void sparse_check_sums(ops::AttentionParams p, const std::vector<int64_t>& tiles, int64_t q_tile,
                       double* diff, double* ref) {
  const float* sparse_out = p.out;
  const int64_t I = p.heads * p.head_dim;
  const int64_t stride = p.out_row_stride ? p.out_row_stride : I;
  FloatVec dense(p.rows * stride);
  p.out = dense.data();
  p.blocks = nullptr;
  std::fill(diff, diff + p.heads, 0.0);
  std::fill(ref, ref + p.heads, 0.0);
  for (const int64_t t : tiles) {
    p.row_begin = t * q_tile;
    p.row_end = std::min(p.rows, (t + 1) * q_tile);
    ops::attention_cpu(p);
    for (int64_t r = p.row_begin; r < p.row_end; ++r)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t d = 0; d < p.head_dim; ++d) {
          const int64_t e = r * stride + h * p.head_dim + d;
          diff[h] += std::fabs(double(sparse_out[e]) - double(dense[e]));
          ref[h] += std::fabs(double(dense[e]));
        }
  }
}

FloatVec attention_sublayer(const Ctx& ctx, const AttentionWeights& w, const float* n, int64_t rows,
                            const RopeTables* rope, const std::string& prefix,
                            const SparseRun* sparse) {
  const H3Config& c = ctx.config;
  const int64_t I = c.inner(), stride = 3 * I;
  FloatVec qkv = apply_linear(w.qkv, n, rows, ctx.bf16());  // [rows, 3I] = [q | k | v]
  ops::QkNormRopeParams p{.qkv = qkv.data(),
                          .row_stride = stride,
                          .q_offset = 0,
                          .k_offset = I,
                          .rows = rows,
                          .heads = c.heads,
                          .head_dim = c.head_dim,
                          .rope_dim = c.rope_dim(),
                          .q_weight = w.q_norm.data(),
                          .k_weight = w.k_norm.data(),
                          .eps = c.qk_norm_eps,
                          .bf16 = ctx.bf16()};
  if (rope) {
    p.cos = rope->cos.data();
    p.sin = rope->sin.data();
  }
  const bool observe = ctx.probing() && !prefix.empty();
  const Shape qk_shape = {rows, c.heads, c.head_dim};
  if (observe) {  // two passes, so the normalized q/k can be observed before RoPE
    p.rope = false;
    ops::qk_norm_rope_cpu(p);
    ctx.emit(prefix + "q_norm", columns(qkv, rows, stride, 0, I).data(), qk_shape);
    ctx.emit(prefix + "k_norm", columns(qkv, rows, stride, I, I).data(), qk_shape);
    p.norm = false;
  }
  p.rope = rope != nullptr;
  ops::qk_norm_rope_cpu(p);
  if (observe && rope) {
    ctx.emit(prefix + "q_rope", columns(qkv, rows, stride, 0, I).data(), qk_shape);
    ctx.emit(prefix + "k_rope", columns(qkv, rows, stride, I, I).data(), qk_shape);
  }
  attention_sparse::HostBlockLists lists;
  if (sparse) {
    const attention_sparse::RouterShape shape{rows, c.heads, c.head_dim, SparseRun::kCpuSparseTile,
                                              sparse->prefix_rows};
    const uint8_t* dense_heads =
        sparse->check ? sparse->check->dense_heads(sparse->block) : nullptr;
    lists = attention_sparse::route_cpu({qkv.data(), qkv.data() + I, stride, stride, dense_heads},
                                        shape, *sparse->cfg);
    if (sparse->stats) {
      sparse->stats->key_blocks_total += lists.stats.key_blocks_total;
      sparse->stats->key_blocks_computed += lists.stats.key_blocks_computed;
    }
  }
  const attention_sparse::BlockList view = sparse ? lists.view() : attention_sparse::BlockList{};
  FloatVec heads(rows * I);
  ops::AttentionParams ap{.q = qkv.data(),
                          .k = qkv.data() + I,
                          .v = qkv.data() + 2 * I,
                          .q_row_stride = stride,
                          .k_row_stride = stride,
                          .v_row_stride = stride,
                          .out = heads.data(),
                          .rows = rows,
                          .heads = c.heads,
                          .head_dim = c.head_dim,
                          .round_bf16 = ctx.bf16(),
                          .blocks = sparse ? &view : nullptr};
  ops::attention_cpu(ap);
  if (sparse && sparse->check && sparse->check->checking()) check_sparse_block(*sparse, ap);
  FloatVec out = apply_linear(w.out, heads.data(), rows, ctx.bf16());
  if (observe) ctx.emit(prefix + "attn_out", out.data(), {rows, c.hidden});
  return out;
}

FloatVec mlp_sublayer(const Ctx& ctx, const MlpWeights& w, const float* n, int64_t rows) {
  const int64_t F = w.fc2.in;
  FloatVec h = apply_linear(w.fc1, n, rows, ctx.bf16());  // [rows, 2F] = [gate | value]
  FloatVec act(rows * F);
  ops::swiglu_cpu({.in = h.data(), .out = act.data(), .rows = rows, .ffn = F, .bf16 = ctx.bf16()});
  return apply_linear(w.fc2, act.data(), rows, ctx.bf16());
}

void refiner_block(const Ctx& ctx, const RefinerBlockWeights& w, FloatVec& t, int64_t rows) {
  const H3Config& c = ctx.config;
  FloatVec n(rows * c.hidden);
  ops::RmsNormModulateParams norm{.x = t.data(),
                                  .y = n.data(),
                                  .weight = w.norm1.data(),
                                  .rows = rows,
                                  .dim = c.hidden,
                                  .eps = c.norm_eps,
                                  .bf16 = ctx.bf16()};
  ops::rmsnorm_modulate_cpu(norm);
  const FloatVec a = attention_sublayer(ctx, w.attn, n.data(), rows, nullptr, "");
  ops::gated_residual_cpu(
      {.x = t.data(), .y = a.data(), .rows = rows, .dim = c.hidden, .bf16 = ctx.bf16()});
  norm.weight = w.norm2.data();
  ops::rmsnorm_modulate_cpu(norm);
  const FloatVec m = mlp_sublayer(ctx, w.mlp, n.data(), rows);
  ops::gated_residual_cpu(
      {.x = t.data(), .y = m.data(), .rows = rows, .dim = c.hidden, .bf16 = ctx.bf16()});
}

namespace {

enum Chunk { kShiftMsa, kScaleMsa, kGateMsa, kShiftMlp, kScaleMlp, kGateMlp };

// n = RMSNorm(x, weight) * (1 + scale) + shift with the row's table row; emits the bare norm.
FloatVec norm_modulate(const Ctx& ctx, const FloatVec& x, const FloatVec& weight,
                       const ModTable& mod, Chunk shift, Chunk scale, int64_t rows,
                       const std::string& probe_name) {
  const int64_t H = ctx.config.hidden;
  FloatVec n(rows * H), bare(ctx.probing() ? rows * H : 0);
  ops::rmsnorm_modulate_cpu({.x = x.data(),
                             .y = n.data(),
                             .norm_out = bare.empty() ? nullptr : bare.data(),
                             .weight = weight.data(),
                             .shift = mod.chunk(shift, H),
                             .scale = mod.chunk(scale, H),
                             .row_table_index = mod.rows,
                             .rows = rows,
                             .dim = H,
                             .table_row_stride = mod.row_stride,
                             .eps = ctx.config.norm_eps,
                             .bf16 = ctx.bf16()});
  if (!bare.empty()) ctx.emit(probe_name, bare.data(), {rows, H});
  return n;
}

void gate_add(const Ctx& ctx, FloatVec& x, const FloatVec& y, const ModTable& mod, Chunk gate,
              int64_t rows) {
  const int64_t H = ctx.config.hidden;
  ops::gated_residual_cpu({.x = x.data(),
                           .y = y.data(),
                           .gate = mod.chunk(gate, H),
                           .row_table_index = mod.rows,
                           .rows = rows,
                           .dim = H,
                           .table_row_stride = mod.row_stride,
                           .bf16 = ctx.bf16()});
}

// The table [3M, 6H] viewed as the golden's [6, 3M, H] (chunk-major).
void emit_adaln(const Ctx& ctx, const std::string& name, const FloatVec& table, int64_t rows) {
  const int64_t H = ctx.config.hidden;
  FloatVec t(table.size());
  for (int64_t c = 0; c < 6; ++c)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < H; ++j) t[(c * rows + r) * H + j] = table[(r * 6 + c) * H + j];
  ctx.emit(name, t.data(), {6, rows, H});
}

}  // namespace

void transformer_block(const Ctx& ctx, const BlockWeights& w, int64_t index, FloatVec& x,
                       const FloatVec& silu_temb, int64_t num_timesteps, const int64_t* adaln_rows,
                       const RopeTables& rope, const SparseRun* sparse) {
  const int64_t H = ctx.config.hidden, S = static_cast<int64_t>(x.size()) / H;
  const std::string pre = "block" + std::to_string(index) + "/";
  // [M, 18H] is the [3M, 6H] table: row m*3 + tag, chunks of H in Chunk order.
  const FloatVec table = apply_linear(w.adaln, silu_temb.data(), num_timesteps, ctx.bf16());
  if (ctx.probing()) emit_adaln(ctx, pre + "adaln", table, 3 * num_timesteps);
  const ModTable mod{table.data(), 6 * H, adaln_rows};

  FloatVec n = norm_modulate(ctx, x, w.norm1, mod, kShiftMsa, kScaleMsa, S, pre + "norm1_out");
  const FloatVec a = attention_sublayer(ctx, w.attn, n.data(), S, &rope, pre, sparse);
  gate_add(ctx, x, a, mod, kGateMsa, S);
  n = norm_modulate(ctx, x, w.norm2, mod, kShiftMlp, kScaleMlp, S, pre + "norm2_out");
  const FloatVec m = mlp_sublayer(ctx, w.mlp, n.data(), S);
  ctx.emit(pre + "ff_out", m.data(), {S, H});
  gate_add(ctx, x, m, mod, kGateMlp, S);
}

}  // namespace h3rt::model
