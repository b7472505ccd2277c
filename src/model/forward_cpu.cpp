// The CPU reference forward (README section 5): RoPE table, timestep embedding, input
// projections and token refiner, packing, the transformer blocks, the final layer and heads.
#include <algorithm>
#include <functional>
#include <string>

#include "h3rt/formats.h"
#include "model/forward_internal.h"
#include "model/pdd_head.h"
#include "model/step_cache_cpu.h"
#include "ops/adaln_curve/adaln_curve.h"
#include "ops/attention_sparse/router.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"
#include "ops/rope_table/rope_table.h"
#include "ops/swiglu/swiglu.h"
#include "ops/time_embedding/time_embedding.h"

namespace h3rt {

namespace {

using model::Ctx;

int64_t count(const std::vector<int64_t>& v) {
  return static_cast<int64_t>(v.size());
}

void check_inputs(const H3Config& c, const ForwardInputs& in) {
  const SequenceLayout& l = in.layout;
  const int64_t S = static_cast<int64_t>(l.token_tags.size());
  H3RT_CHECK(
      count(l.text_indices) + count(l.audio_indices) + count(l.video_indices) + l.cond_rows() == S,
      "forward: text/condition/audio/video index counts do not add up to S = ", S);
  H3RT_CHECK(static_cast<int64_t>(l.position_ids.size()) == 3 * S, "forward: position_ids has ",
             l.position_ids.size(), " values, expected [", S, ", 3]");
  H3RT_CHECK(count(in.plan.timestep_indices) == S, "forward: timestep_indices has ",
             in.plan.timestep_indices.size(), " rows, expected S = ", S);
  const int64_t M = static_cast<int64_t>(in.plan.timestep.size());
  H3RT_CHECK(M > 0, "forward: no timesteps");
  for (int64_t r = 0; r < S; ++r) {
    H3RT_CHECK(in.plan.timestep_indices[r] >= 0 && in.plan.timestep_indices[r] < M,
               "forward: timestep index out of range at row ", r);
    H3RT_CHECK(l.token_tags[r] >= 0 && l.token_tags[r] < 3, "forward: bad tag at row ", r);
  }
  for (const auto* idx : {&l.text_indices, &l.audio_indices, &l.video_indices,
                          &l.cond_video_indices, &l.cond_audio_indices})
    for (int64_t i : *idx) H3RT_CHECK(i >= 0 && i < S, "forward: packed row index ", i, " >= S");
  H3RT_CHECK(in.cond_video_rows || l.cond_video_indices.empty(),
             "forward: the layout has condition video rows and cond_video_rows is null");
  H3RT_CHECK(in.cond_audio_rows || l.cond_audio_indices.empty(),
             "forward: the layout has condition audio rows and cond_audio_rows is null");
  H3RT_CHECK(in.text || l.text_indices.empty(), "forward: text is null");
  H3RT_CHECK(in.video_rows || l.video_indices.empty(), "forward: video_rows is null");
  H3RT_CHECK(in.audio_rows || l.audio_indices.empty(), "forward: audio_rows is null");
  model::check_pdd_schedule(c, in.schedule);
}

model::RopeTables rope_tables(const Ctx& ctx, const H3Model& m, const SequenceLayout& l) {
  const int64_t S = static_cast<int64_t>(l.token_tags.size()), R = ctx.config.rope_dim();
  model::RopeTables t{FloatVec(S * R), FloatVec(S * R)};
  ops::rope_table_cpu({.positions = l.position_ids.data(),
                       .inv_freq = m.weights.rope_inv_freq.data(),
                       .cos = t.cos.data(),
                       .sin = t.sin.data(),
                       .rows = S,
                       .freqs = ctx.config.rope_freqs});
  ctx.emit("rope_cos", t.cos.data(), {S, R});
  ctx.emit("rope_sin", t.sin.data(), {S, R});
  return t;
}

// The curve form's AdaLN input: the table row interpolated at each timestep, float32 in both
// precisions (ComfyUI runs the curve form's AdaLN in float32).
FloatVec curve_input(const Ctx& ctx, const H3Model& m, const std::vector<float>& timesteps) {
  const H3Config& c = ctx.config;
  const int64_t M = static_cast<int64_t>(timesteps.size());
  FloatVec emb(M * c.adaln_curve_rank);
  ops::adaln_curve_embed_cpu({.table = m.weights.adaln_t_table.data(),
                              .t = timesteps.data(),
                              .out = emb.data(),
                              .grid = c.adaln_curve_grid,
                              .rank = c.adaln_curve_rank,
                              .count = M});
  ctx.emit("adaln_curve_emb", emb.data(), {M, c.adaln_curve_rank});
  return emb;
}

// silu(temb) in float32, cast to bf16 in bf16 mode: the input of every AdaLN linear (the
// interpolated table row for the curve form).
FloatVec adaln_input(const Ctx& ctx, const H3Model& m, const std::vector<float>& timesteps) {
  const H3Config& c = ctx.config;
  if (c.adaln_curve()) return curve_input(ctx, m, timesteps);
  const int64_t M = static_cast<int64_t>(timesteps.size());
  FloatVec sinusoid(M * c.freq_dim), temb(M * c.time_embed_dim);
  const H3Weights& w = m.weights;
  ops::time_embedding_cpu({.t = timesteps.data(),
                           .w_in = dense_weight(w.time_in).data(),
                           .b_in = w.time_in.b.data(),
                           .w_out = dense_weight(w.time_out).data(),
                           .b_out = w.time_out.b.data(),
                           .sinusoid = sinusoid.data(),
                           .temb = temb.data(),
                           .count = M,
                           .dim = c.freq_dim,
                           .hidden = c.time_embed_hidden,
                           .embed = c.time_embed_dim});
  ctx.emit("time_sinusoid", sinusoid.data(), {M, c.freq_dim});
  ctx.emit("temb", temb.data(), {M, c.time_embed_dim});
  for (float& v : temb) v = ctx.bf16() ? round_bf16(ops::silu(v)) : ops::silu(v);
  return temb;
}

// condition_proj, the refiner blocks and the refiner's final RMSNorm on the L text rows.
FloatVec text_stream(const Ctx& ctx, const H3Model& m, const float* text, int64_t L) {
  const H3Config& c = ctx.config;
  FloatVec x(text, text + L * c.text_dim);
  if (ctx.bf16())
    for (float& v : x) v = round_bf16(v);  // the encoder output is bf16
  FloatVec t = model::apply_linear(m.weights.text_in, x.data(), L, ctx.bf16());
  ctx.emit("text_proj", t.data(), {L, c.hidden});
  for (const auto& block : m.weights.refiner) model::refiner_block(ctx, block, t, L);
  ops::rmsnorm_modulate_cpu({.x = t.data(),
                             .y = t.data(),
                             .weight = m.weights.refiner_norm.data(),
                             .rows = L,
                             .dim = c.hidden,
                             .eps = c.final_norm_eps,
                             .bf16 = ctx.bf16()});
  ctx.emit("text_refined", t.data(), {L, c.hidden});
  return t;
}

// Float32 patch projection (a float32 island in both precisions), emitted as `name`.
FloatVec embed_rows(const Ctx& ctx, const LinearWeight& lw, const float* rows, int64_t n,
                    const std::string& name) {
  if (n == 0) return {};
  FloatVec e = model::apply_linear(lw, rows, n, /*round_bf16=*/false);
  ctx.emit(name, e.data(), {n, lw.out});
  return e;
}

// X [S, H] zero-filled, then the three streams scattered to their packed rows (cast to bf16 in
// bf16 mode: the stack dtype).
void scatter(const Ctx& ctx, FloatVec& X, const FloatVec& src, const std::vector<int64_t>& idx) {
  const int64_t H = ctx.config.hidden;
  for (size_t i = 0; i < idx.size(); ++i)
    for (int64_t j = 0; j < H; ++j) {
      const float v = src[i * H + j];
      X[idx[i] * H + j] = ctx.bf16() ? round_bf16(v) : v;
    }
}

// Final RMSNorm modulated by the timestep's [shift | scale] row, then the float32 heads (a PDD
// bank's effective heads for the step). The curve form keeps [shift | scale] in float32: in
// bf16 mode the norm is rounded to bf16 and the modulation runs in float32 (curve_modulate).
ForwardOutputs final_layer(const Ctx& ctx, const H3Model& m, const ForwardInputs& in,
                           const FloatVec& x, const FloatVec& silu_temb) {
  const H3Config& c = ctx.config;
  const H3Weights& w = m.weights;
  const int64_t H = c.hidden, S = static_cast<int64_t>(x.size()) / H;
  const int64_t M = static_cast<int64_t>(in.plan.timestep.size());
  const bool f32_mod = c.adaln_curve() && ctx.bf16();
  const FloatVec mod =
      model::apply_linear(w.final_adaln, silu_temb.data(), M, ctx.bf16() && !c.adaln_curve());
  FloatVec y(S * H);
  ops::RmsNormModulateParams norm{.x = x.data(),
                                  .y = y.data(),
                                  .weight = w.final_norm.data(),
                                  .shift = mod.data(),
                                  .scale = mod.data() + H,
                                  .row_table_index = in.plan.timestep_indices.data(),
                                  .rows = S,
                                  .dim = H,
                                  .table_row_stride = 2 * H,
                                  .eps = c.final_norm_eps,
                                  .bf16 = ctx.bf16()};
  if (f32_mod) norm.shift = norm.scale = nullptr;  // the plain bf16 norm first
  ops::rmsnorm_modulate_cpu(norm);
  if (f32_mod)
    ops::curve_modulate_cpu({.n = y.data(),
                             .shift = mod.data(),
                             .scale = mod.data() + H,
                             .row_table_index = in.plan.timestep_indices.data(),
                             .y = y.data(),
                             .rows = S,
                             .dim = H,
                             .table_row_stride = 2 * H});
  ctx.emit("final_norm_out", y.data(), {S, H});
  auto head = [&](const LinearWeight& lw, const std::vector<int64_t>& idx) {
    FloatVec rows(idx.size() * H);
    for (size_t i = 0; i < idx.size(); ++i)
      std::copy_n(y.data() + idx[i] * H, H, rows.data() + i * H);
    return model::apply_linear(lw, rows.data(), count(idx), /*round_bf16=*/false);
  };
  if (c.pdd_heads > 1) {
    const model::OutputHeads h = model::pdd_output_heads(c, w, in.schedule);
    return {head(h.video, in.layout.video_indices), head(h.audio, in.layout.audio_indices)};
  }
  return {head(w.video_out, in.layout.video_indices), head(w.audio_out, in.layout.audio_indices)};
}

// The transformer blocks on x, in place. With a step cache: block 0, then either the cached
// residual of blocks 1..end (a reuse) or every block and a refresh of the cache.
void run_blocks(const Ctx& ctx, StepCache* cache, FloatVec& x,
                const std::function<void(int64_t)>& block) {
  const int64_t layers = ctx.config.layers;
  if (!cache || !cache->enabled() || layers < 2) {
    for (int64_t i = 0; i < layers; ++i) block(i);
    return;
  }
  const auto n = static_cast<int64_t>(x.size());
  const FloatVec in0 = x;
  block(0);
  if (cache->decide(model::step_cache_rel_l1_cpu(*cache, in0.data(), x.data(), n))) {
    model::step_cache_apply_cpu(*cache, x.data(), n, ctx.bf16());
    return;
  }
  const FloatVec out0 = x;
  for (int64_t i = 1; i < layers; ++i) block(i);
  model::step_cache_refresh_cpu(*cache, in0.data(), out0.data(), x.data(), n);
}

}  // namespace

ForwardOutputs forward_cpu(const H3Model& model, const ForwardInputs& in, Precision precision,
                           const Probe* probe) {
  const H3Config& c = model.config;
  check_inputs(c, in);
  const Ctx ctx{c, precision, probe};
  const SequenceLayout& l = in.layout;
  const int64_t S = static_cast<int64_t>(l.token_tags.size()), H = c.hidden;
  const int64_t M = static_cast<int64_t>(in.plan.timestep.size());

  const model::RopeTables rope = rope_tables(ctx, model, l);
  const FloatVec silu_temb = adaln_input(ctx, model, in.plan.timestep);

  // AdaLN table row per packed row (README step 4).
  std::vector<int64_t> adaln_rows(S);
  for (int64_t r = 0; r < S; ++r) adaln_rows[r] = in.plan.timestep_indices[r] * 3 + l.token_tags[r];
  if (ctx.probing()) {
    const std::vector<float> f(adaln_rows.begin(), adaln_rows.end());
    ctx.emit("adaln_indices", f.data(), {S});
  }

  const FloatVec video = embed_rows(ctx, model.weights.video_in, in.video_rows,
                                    count(l.video_indices), "video_embeds");
  const FloatVec audio = embed_rows(ctx, model.weights.audio_in, in.audio_rows,
                                    count(l.audio_indices), "audio_embeds");
  const FloatVec text = text_stream(ctx, model, in.text, count(l.text_indices));

  // Condition rows go through the same patch projections (row by row: the same values as one
  // projection of all video-type rows, ComfyUI's order).
  const FloatVec cond_video = embed_rows(ctx, model.weights.video_in, in.cond_video_rows,
                                         count(l.cond_video_indices), "cond_video_embeds");
  const FloatVec cond_audio = embed_rows(ctx, model.weights.audio_in, in.cond_audio_rows,
                                         count(l.cond_audio_indices), "cond_audio_embeds");

  FloatVec x(S * H, 0.0f);
  scatter(ctx, x, text, l.text_indices);
  scatter(ctx, x, cond_video, l.cond_video_indices);
  scatter(ctx, x, cond_audio, l.cond_audio_indices);
  scatter(ctx, x, video, l.video_indices);
  scatter(ctx, x, audio, l.audio_indices);
  ctx.emit("packed_input", x.data(), {S, H});

  const bool sparse = in.sparse && in.sparse->enabled();
  SparseCheck* check = sparse ? in.sparse_check : nullptr;
  if (check) check->shape(c.layers, c.heads);
  const auto block = [&](int64_t i) {
    const bool sparse_block = sparse && i >= in.sparse->dense_blocks;
    const model::SparseRun run{in.sparse, sparse ? attention_sparse::prefix_rows_of(l) : 0,
                               in.sparse_stats, check, i};
    model::transformer_block(ctx, model.weights.blocks[i], i, x, silu_temb, M, adaln_rows.data(),
                             rope, sparse_block ? &run : nullptr);
    ctx.emit("block" + std::to_string(i) + "_out", x.data(), {S, H});
  };
  run_blocks(ctx, in.step_cache, x, block);
  return final_layer(ctx, model, in, x, silu_temb);
}

}  // namespace h3rt
