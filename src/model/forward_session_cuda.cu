// The GPU forward session (see forward_session_cuda.h and model_cuda.h for what runs where).
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include "core/env.h"
#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "h3rt/formats.h"
#include "model/adaln_int8_cuda.h"
#include "model/block_cuda.h"
#include "model/forward_session_cuda.h"
#include "model/io_int8_cuda.h"
#include "model/pdd_head.h"
#include "model/session_cache_cuda.h"
#include "model/session_graphs_cuda.h"
#include "model/session_sparse_cuda.h"
#include "model/session_util_cuda.h"
#include "model/weight_stream_cuda.h"
#include "ops/adaln_curve/adaln_curve.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"
#include "ops/rope_table/rope_table.h"

namespace h3rt::model {
namespace {

using bf16 = __nv_bfloat16;
using Clock = std::chrono::steady_clock;

using cuda::Pinned;

}  // namespace

struct ForwardSessionCuda::Impl {
  const DeviceModel& m;
  const SequenceLayout layout;
  ForwardSessionOptions opt;
  int64_t S, Nv, Na, L, H, video0, audio0;
  cuda::Stream s;

  // The slots and copy stream when the model's blocks stream (DeviceModel::streamed).
  std::unique_ptr<BlockWeightStream> weights;

  BlockCudaBuffers b;
  Tensor tidx;                           // [S] int64 timestep index per row (final layer)
  Tensor final_table;                    // [Mcap, 2H] bf16 (curve form: f32)
  Tensor table_alt;  // [3 Mcap, 6H]: chained blocks alternate it with b.table (BlockChain)
  Tensor temb;                           // [Mcap, Tm] bf16 silu(temb) (curve form: f32 [Mcap, k])
  AdalnInt8Scratch adaln_i8;             // int8 AdaLN layers: Mcap quantized rows (else empty)
  Tensor video_in, audio_in;             // [Nv, 96], [Na, 32] f32
  Tensor video_v, audio_v;               // velocities, f32
  Tensor scratch_own;                    // float32 scratch when b.h is too small
  Tensor cublas_ws;                      // cuBLAS workspace (fixed: capture-safe)
  Tensor text_rows;                      // [L, H] bf16: the refined, normed text rows
  Tensor text_dev;                       // [L, text_dim] bf16 text embeddings
  std::unique_ptr<BlockCudaBuffers> rb;  // refiner activations (L rows)
  int64_t mcap = 0;
  // The output heads: the model's, or for a PDD bank the session's effective-head buffers,
  // refilled from h_heads (host-combined [video w | video b | audio w | audio b]) each step.
  DeviceLinear video_head, audio_head;
  Pinned h_heads;
  std::vector<float> cached_head_key;  // span and weights of the heads in h_heads
  // Condition rows: their bf16 embeddings are fixed for a run (computed when the rows change) and
  // copied into the packed stream each step, run by run.
  int64_t Ncv = 0, Nca = 0;
  std::vector<RowRun> cond_video_runs, cond_audio_runs;
  Tensor cond_video_emb, cond_audio_emb;  // [Ncv, H], [Nca, H] bf16
  std::vector<float> cached_cond_video, cached_cond_audio;

  Pinned h_temb, h_video, h_audio, h_video_v, h_audio_v;

  // The time embedding of the timesteps a caller said come next (ForwardInputs::next_timesteps),
  // computed while the device ran the previous step: the bytes h_temb will take.
  std::vector<float> ahead_timesteps;
  std::vector<uint8_t> ahead_temb;

  // What the device currently holds (cache keys).
  std::vector<float> cached_text, cached_timesteps;
  std::vector<int64_t> cached_tidx, row_index_host;
  bool text_valid = false, tables_valid = false;

  // The step's graphs, keyed by graph_key; warmed by graph_key(M, false, part).
  StepGraphs graphs;
  bool timed_any = false;  // this step ran a part eagerly with stage timing

  // Block-sparse attention of this step (set by forward; h3rt/sparse.h) and its sampled check.
  SessionSparse sparse;
  // First-block step caching (its buffers on first use).
  SessionStepCache step_cache;

  cudaEvent_t ev0 = nullptr, ev1 = nullptr;
  // Device forwards (ForwardInputs::device): the caller's stream and h3rt's joined by events;
  // `pending`: the last one returned without waiting (the next waits before refilling staging).
  cudaEvent_t ev_caller = nullptr, ev_done = nullptr;
  bool pending = false;
  StageTimer timer;
  ForwardStepTimes times;

  // Finite checks of this step (set_check_finite).
  FiniteFlags finite;

  Impl(const DeviceModel& model, const SequenceLayout& lay, const ForwardSessionOptions& o)
      : m(model),
        layout(lay),
        opt(o),
        sparse(layout, lay.seq_len(), static_cast<int64_t>(model.blocks.size()),
               model.config.heads),
        step_cache(lay.seq_len(), model.config.hidden) {
    const MemoryScope scope(detail::concat("the forward session's activations (", lay.seq_len(),
                                           " rows: ", lay.text_len, " text, ", lay.audio_rows(),
                                           " audio, ", lay.video_rows(), " video)"));
    check_packed_order(layout);
    const H3Config& c = m.config;
    S = layout.seq_len();
    Nv = layout.video_rows();
    Na = layout.audio_rows();
    L = layout.text_len;
    H = c.hidden;
    audio0 = Na ? layout.audio_indices[0] : L;
    video0 = Nv ? layout.video_indices[0] : L;
    Ncv = static_cast<int64_t>(layout.cond_video_indices.size());
    Nca = static_cast<int64_t>(layout.cond_audio_indices.size());
    cond_video_runs = row_runs(layout.cond_video_indices);
    cond_audio_runs = row_runs(layout.cond_audio_indices);
    cond_video_emb = cuda::device_empty(DType::bf16, {Ncv, H});
    cond_audio_emb = cuda::device_empty(DType::bf16, {Nca, H});
    b = make_block_buffers(c, S, 3 * 2, m.has_fp8(), m.has_nvfp4(), opt.attention,
                           m.has_int8() || m.has_int8_io());
    if (m.streamed) weights = std::make_unique<BlockWeightStream>(m);
    grow_tables(2);
    tidx = cuda::device_empty(DType::i64, {S});
    video_in = cuda::device_empty(DType::f32, {Nv, m.video_in.in});
    audio_in = cuda::device_empty(DType::f32, {Na, m.audio_in.in});
    video_v = cuda::device_empty(DType::f32, {Nv, m.video_out.out});
    audio_v = cuda::device_empty(DType::f32, {Na, m.audio_out.out});
    make_heads();
    const int64_t scratch_rows = std::max({Nv, Na, Ncv, Nca});
    if (b.h.nbytes() < scratch_rows * H * 4)
      scratch_own = cuda::device_empty(DType::f32, {scratch_rows, H});
    cublas_ws = cuda::device_empty(DType::u8, {int64_t(kCublasWorkspaceBytes)});
    text_rows = cuda::device_empty(DType::bf16, {L, H});
    h_video = Pinned(video_in.nbytes());
    h_audio = Pinned(audio_in.nbytes());
    h_video_v = Pinned(video_v.nbytes());
    h_audio_v = Pinned(audio_v.nbytes());

    // RoPE tables depend on the positions only: computed once.
    std::vector<float> cosv(S * c.rope_dim()), sinv(S * c.rope_dim());
    ops::rope_table_cpu({layout.position_ids.data(), m.rope_inv_freq.data(), cosv.data(),
                         sinv.data(), S, c.rope_freqs});
    H3RT_CUDA_CHECK(
        cudaMemcpyAsync(b.cos.data(), cosv.data(), b.cos.nbytes(), cudaMemcpyHostToDevice, s));
    H3RT_CUDA_CHECK(
        cudaMemcpyAsync(b.sin.data(), sinv.data(), b.sin.nbytes(), cudaMemcpyHostToDevice, s));
    H3RT_CUDA_CHECK(cudaEventCreate(&ev0));
    H3RT_CUDA_CHECK(cudaEventCreate(&ev1));
    H3RT_CUDA_CHECK(cudaEventCreateWithFlags(&ev_caller, cudaEventDisableTiming));
    H3RT_CUDA_CHECK(cudaEventCreateWithFlags(&ev_done, cudaEventDisableTiming));
    s.synchronize();  // cosv and sinv die here
  }

  ~Impl() {
    cudaStreamSynchronize(s);
    if (ev0) cudaEventDestroy(ev0);
    if (ev1) cudaEventDestroy(ev1);
    for (cudaEvent_t e : {ev_caller, ev_done})
      if (e) cudaEventDestroy(e);
  }

  bool pdd() const { return m.config.pdd_heads > 1; }
  bool curve() const { return m.config.adaln_curve(); }

  void make_heads() {
    video_head = m.video_out;
    audio_head = m.audio_out;
    if (!pdd()) return;
    int64_t floats = 0;
    for (DeviceLinear* h : {&video_head, &audio_head}) {
      h->w = cuda::device_empty(DType::f32, {h->out, h->in});
      h->b = cuda::device_empty(DType::f32, {h->out});
      floats += h->out * (h->in + 1);
    }
    h_heads = Pinned(floats * sizeof(float));
  }

  // A PDD bank's effective heads for this step's schedule, into the pinned staging buffer
  // (recombined only when the span or its weights change).
  void prepare_heads(const SigmaSchedule* schedule) {
    if (!pdd()) return;
    const int64_t n = m.config.pdd_heads;
    check_pdd_schedule(m.config, schedule);
    const PddSpan span = pdd_span(n, *schedule);
    const std::vector<float> wv = pdd_weights(n, span, schedule->shift_video);
    const std::vector<float> wa = pdd_weights(n, span, schedule->shift_audio);
    std::vector<float> key = {float(span.start), float(span.stop)};
    key.insert(key.end(), wv.begin(), wv.end());
    key.insert(key.end(), wa.begin(), wa.end());
    if (key == cached_head_key) return;
    float* dst = h_heads.as<float>();
    for (const LinearWeight& h : {pdd_effective_head(m.video_bank, n, span, wv),
                                  pdd_effective_head(m.audio_bank, n, span, wa)}) {
      dst = std::copy(h.w.begin(), h.w.end(), dst);
      dst = std::copy(h.b.begin(), h.b.end(), dst);
    }
    cached_head_key = std::move(key);
  }

  void upload_heads() {  // stream-ordered copies from the staging buffer (graph-capturable)
    if (!pdd()) return;
    const char* src = h_heads.as<char>();
    for (const DeviceLinear* h : {&video_head, &audio_head})
      for (const Tensor* t : {&h->w, &h->b}) {
        H3RT_CUDA_CHECK(cudaMemcpyAsync(t->data(), src, t->nbytes(), cudaMemcpyHostToDevice, s));
        src += t->nbytes();
      }
  }

  float* scratch() const {
    return scratch_own.data() ? scratch_own.ptr<float>() : b.h.ptr<float>();
  }

  // Room for M distinct timesteps; graphs hold the old pointers, so they go.
  void grow_tables(int64_t M) {
    if (M <= mcap) return;
    s.synchronize();
    graphs.clear();
    mcap = M;
    const H3Config& c = m.config;
    b.table = cuda::device_empty(DType::bf16, {3 * M, 6 * H});
    table_alt = cuda::device_empty(DType::bf16, {3 * M, 6 * H});
    const DType adaln = curve() ? DType::f32 : DType::bf16;
    final_table = cuda::device_empty(adaln, {M, 2 * H});
    temb = cuda::device_empty(adaln, {M, c.adaln_in()});
    h_temb = Pinned(temb.nbytes());
    if (m.has_int8_adaln()) adaln_i8 = make_adaln_int8_scratch(M, c.adaln_in(), 18 * H);
    tables_valid = false;
    cached_timesteps.clear();
  }

  // ---- host preparation (cache checks, uploads of what changed) ---------------------------

  void prepare_text(const float* text) {
    const H3Config& c = m.config;
    const size_t n = static_cast<size_t>(L * c.text_dim);
    times.text_refined = false;
    if (n == 0) {
      text_valid = true;
      return;
    }
    H3RT_CHECK(text != nullptr, "forward: no text embeddings for ", L, " text rows");
    if (text_valid && std::memcmp(cached_text.data(), text, n * sizeof(float)) == 0) return;
    cached_text.assign(text, text + n);
    text_valid = false;
    if (!rb) {
      const MemoryScope scope("the token refiner's activations");
      rb = std::make_unique<BlockCudaBuffers>(
          make_block_buffers(c, L, 3, m.has_fp8(), m.has_nvfp4(), ops::AttentionKernel::flash_bf16,
                             m.has_int8() || m.text_in.int8()));
      text_dev = cuda::device_empty(DType::bf16, {L, c.text_dim});
    }
    std::vector<uint16_t> bits(n);
    for (size_t i = 0; i < n; ++i) bits[i] = f32_to_bf16(text[i]);
    H3RT_CUDA_CHECK(cudaEventRecord(ev0, s));
    H3RT_CUDA_CHECK(cudaMemcpyAsync(text_dev.data(), bits.data(), text_dev.nbytes(),
                                    cudaMemcpyHostToDevice, s));
    // Text: condition_proj, the refiner blocks over the L text rows, and the final norm.
    if (m.text_in.int8())
      int8_project_cuda(m.text_in, text_dev.ptr<bf16>(), rb->x.ptr<bf16>(), L,
                        int8_io_activation(*rb, L, m.text_in.in, "condition_proj"), s);
    else
      linear_bf16(m.text_in, text_dev.ptr<bf16>(), rb->x.ptr<bf16>(), L, s);
    for (const DeviceBlock& blk : m.refiner) block_forward_cuda(c, blk, *rb, s, nullptr, true);
    ops::RmsNormModulateCudaParams n1;
    n1.x = rb->x.ptr<bf16>();
    n1.y = text_rows.ptr<bf16>();
    n1.weight = m.refiner_norm.ptr<bf16>();
    n1.rows = L;
    n1.dim = H;
    n1.eps = c.final_norm_eps;
    H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(n1, s));
    H3RT_CUDA_CHECK(cudaEventRecord(ev1, s));
    s.synchronize();  // `bits` dies here (only when the text changed)
    float ms = 0;
    H3RT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev0, ev1));
    times.text_refiner_ms = ms;
    times.text_refined = true;
    text_valid = true;
  }

  void prepare_plan(const TimestepPlan& plan) {
    const int64_t M = static_cast<int64_t>(plan.timestep.size());
    H3RT_CHECK(M >= 1, "forward: the timestep plan has no timesteps");
    H3RT_CHECK(static_cast<int64_t>(plan.timestep_indices.size()) == S,
               "forward: timestep_indices has ", plan.timestep_indices.size(), " rows, expected ",
               S);
    grow_tables(M);
    if (!tables_valid || plan.timestep_indices != cached_tidx) {
      cached_tidx = plan.timestep_indices;
      row_index_host = adaln_indices(layout, plan);
      // Pageable sources: the member vectors stay unchanged until the step's final wait.
      H3RT_CUDA_CHECK(cudaMemcpyAsync(b.row_index.data(), row_index_host.data(), S * 8,
                                      cudaMemcpyHostToDevice, s));
      H3RT_CUDA_CHECK(
          cudaMemcpyAsync(tidx.data(), cached_tidx.data(), S * 8, cudaMemcpyHostToDevice, s));
      tables_valid = true;
    }
    if (plan.timestep != cached_timesteps) {
      if (plan.timestep == ahead_timesteps) {
        std::memcpy(h_temb.as<void>(), ahead_temb.data(), ahead_temb.size());
        times.temb_ahead = true;
      } else {
        adaln_input(m, plan.timestep, h_temb.as<void>());
      }
      cached_timesteps = plan.timestep;
    }
  }

  // Bytes of the AdaLN input rows of M timesteps (h_temb, temb; set up by grow_tables).
  size_t temb_bytes(int64_t M) const {
    return static_cast<size_t>(M * m.config.adaln_in()) * dtype_size(temb.dtype());
  }

  // The look-ahead: the next call's time embedding, on the host while the device works; none
  // for the timesteps this call already holds (the next call keeps them).
  void compute_ahead(const std::vector<float>* next) {
    if (!next || next->empty() || *next == ahead_timesteps || *next == cached_timesteps) return;
    const auto t0 = Clock::now();
    ahead_temb.resize(temb_bytes(static_cast<int64_t>(next->size())));
    adaln_input(m, *next, ahead_temb.data());
    ahead_timesteps = *next;
    times.ahead_ms = ms_since(t0);
  }

  // The bf16 embeddings of n condition rows (the patch projection as the target rows take it:
  // embed), recomputed only when the rows change.
  void prepare_cond(const float* rows, int64_t n, const DeviceLinear& proj, Tensor& emb,
                    std::vector<float>& cache, const char* what) {
    if (n == 0) return;
    H3RT_CHECK(rows != nullptr, "forward: the layout has ", n, " condition ", what,
               " rows and none were given");
    const size_t count = static_cast<size_t>(n * proj.in);
    if (cache.size() == count && std::memcmp(cache.data(), rows, count * sizeof(float)) == 0)
      return;
    cache.assign(rows, rows + count);
    Tensor dev = cuda::device_empty(DType::f32, {n, proj.in});
    H3RT_CUDA_CHECK(
        cudaMemcpyAsync(dev.data(), cache.data(), dev.nbytes(), cudaMemcpyHostToDevice, s));
    embed(proj, dev.ptr<float>(), n, emb.ptr<bf16>());
    s.synchronize();  // `dev` dies here (only when the rows changed)
  }

  void copy_runs(const std::vector<RowRun>& runs, const Tensor& emb, bf16* x) {
    for (const RowRun& r : runs)
      H3RT_CUDA_CHECK(cudaMemcpyAsync(x + r.dst * H, emb.ptr<bf16>() + r.src * H,
                                      r.rows * H * sizeof(bf16), cudaMemcpyDeviceToDevice, s));
  }

  // ---- the step's device work (captured into a graph when enabled) ------------------------

  // A patch projection of float32 rows into bf16 rows x [rows, H] (contiguous: l.out = H): the
  // float32 GEMM and one rounding, or an int8 layer's W8A8 (io_int8_cuda.h; b.y stages the bf16
  // input, free before the blocks).
  void embed(const DeviceLinear& l, const float* in, int64_t rows, bf16* x) {
    if (rows == 0) return;
    if (l.int8()) {
      H3RT_CHECK(l.in <= H, "int8 patch projection with ", l.in, " inputs: staged in ", H,
                 "-wide rows");
      int8_project_f32_in_cuda(l, in, b.y.ptr<bf16>(), x, rows,
                               int8_io_activation(b, rows, l.in, "(patch projection)"), s);
      return;
    }
    float* out = scratch();
    linear_f32(l, in, out, rows, cublas_ws.data(), s);
    f32_to_bf16_rows_cuda(out, l.out, x, H, rows, l.out, s);
  }

  // Output head on the normed rows [row0, row0 + rows) of b.n: float32 rows (the bf16 values;
  // the curve form modulates them here in float32), the f32 GEMM (an int8 head: W8A8 of those
  // rows as bf16), then the copy out.
  void head(const DeviceLinear& l, int64_t row0, int64_t rows, const Tensor& v) {
    if (rows == 0) return;
    float* yf = scratch();  // float32 rows (curve form: the modulated ones)
    const bf16* y = b.n.ptr<bf16>() + row0 * H;
    if (curve()) {
      ops::CurveModulateCudaParams p;
      p.n = y;
      p.shift = final_table.ptr<float>();
      p.scale = final_table.ptr<float>() + H;
      p.row_table_index = tidx.ptr<int64_t>() + row0;
      p.y = yf;
      p.rows = rows;
      p.dim = H;
      p.table_row_stride = 2 * H;
      H3RT_CUDA_CHECK(ops::curve_modulate_cuda(p, s));
    }
    if (l.int8()) {  // W8A8 of the bf16 rows (io_int8_cuda.h); b.y and b.attn are free here
      H3RT_CHECK(l.out <= m.config.inner(), "int8 output head with ", l.out, " outputs: staged in ",
                 m.config.inner(), "-wide rows");
      const bf16* x = y;
      if (curve()) {
        f32_to_bf16_rows_cuda(yf, H, b.y.ptr<bf16>(), H, rows, H, s);
        x = b.y.ptr<bf16>();
      }
      int8_project_f32_out_cuda(l, x, b.attn.ptr<bf16>(), v.ptr<float>(), rows,
                                int8_io_activation(b, rows, H, "(output head)"), s);
      return;
    }
    if (!curve()) bf16_to_f32_rows_cuda(y, H, yf, rows, H, s);
    linear_f32(l, yf, v.ptr<float>(), rows, cublas_ws.data(), s);
  }

  // One AdaLN projection of the M timestep rows: the bf16 GEMM, the int8 W8A8 one (a layer the
  // file stores int8; full form only), or the curve form's float32 kernel writing bf16 (block
  // tables) or float32 (the final table) rows.
  void adaln_table(const DeviceLinear& l, void* out, int64_t M, bool f32_out) {
    if (l.int8()) {
      adaln_int8_linear(l, temb.ptr<bf16>(), static_cast<bf16*>(out), M, adaln_i8, s);
      return;
    }
    if (!curve()) {
      linear_bf16(l, temb.ptr<bf16>(), static_cast<bf16*>(out), M, s);
      return;
    }
    ops::AdalnCurveLinearCudaParams p;
    p.x = temb.ptr<float>();
    p.w = l.w.ptr<float>();
    p.bias = l.b.data() ? l.b.ptr<float>() : nullptr;
    if (f32_out)
      p.y = static_cast<float*>(out);
    else
      p.y_bf16 = static_cast<bf16*>(out);
    p.rows = M;
    p.in = l.in;
    p.out = l.out;
    H3RT_CUDA_CHECK(ops::adaln_curve_linear_cuda(p, s));
  }

  void mark(bool timed, const char* stage) {
    if (timed) timer.mark(stage);
  }

  void enqueue_step(int64_t M, bool timed) {
    enqueue_inputs(M, timed);
    enqueue_blocks(0, static_cast<int64_t>(m.blocks.size()), M, timed);
    enqueue_final(M, timed);
  }

  // Staged inputs -> device, text and condition rows into the packed stream, the projections.
  void enqueue_inputs(int64_t M, bool timed) {
    bf16* x = b.x.ptr<bf16>();
    mark(timed, "inputs");
    H3RT_CUDA_CHECK(
        cudaMemcpyAsync(temb.data(), h_temb.as<void>(), temb_bytes(M), cudaMemcpyHostToDevice, s));
    upload_heads();
    if (L)
      H3RT_CUDA_CHECK(
          cudaMemcpyAsync(x, text_rows.data(), text_rows.nbytes(), cudaMemcpyDeviceToDevice, s));
    copy_runs(cond_video_runs, cond_video_emb, x);
    copy_runs(cond_audio_runs, cond_audio_emb, x);
    embed(m.audio_in, audio_in.ptr<float>(), Na, x + audio0 * H);
    embed(m.video_in, video_in.ptr<float>(), Nv, x + video0 * H);
    finite.flag(x, true, S * H, FiniteFlags::kInputTag, s);
    sparse.enqueue_reset(b, s);  // the step's counters start at zero (read back at the end)
  }

  // ---- the target rows in and the velocities out (outside the graphs: their source and
  // destination change per call; the graphs read and write the fixed video_in/.../audio_v) ----

  // Host rows: pinned staging, then H2D. Device rows: after the caller's stream's prior work,
  // one D2D copy each into the fixed input buffers.
  void stage_rows(const ForwardInputs& in) {
    const DeviceIO* d = in.device;
    if (!d) {
      H3RT_CHECK((!Nv || in.video_rows) && (!Na || in.audio_rows), "forward: no target rows");
      if (Nv) std::memcpy(h_video.as<void>(), in.video_rows, h_video.bytes());
      if (Na) std::memcpy(h_audio.as<void>(), in.audio_rows, h_audio.bytes());
    } else {
      H3RT_CHECK(!in.video_rows && !in.audio_rows,
                 "forward: device rows are given in ForwardInputs::device, not as host rows");
      H3RT_CHECK((!Nv || (d->video_rows && d->video_velocity)) &&
                     (!Na || (d->audio_rows && d->audio_velocity)),
                 "forward: a device forward needs device rows and velocity buffers for the ", Nv,
                 " video and ", Na, " audio rows");
      H3RT_CUDA_CHECK(cudaEventRecord(ev_caller, caller(in)));
      H3RT_CUDA_CHECK(cudaStreamWaitEvent(s, ev_caller, 0));
    }
    const auto kind = d ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
    if (Nv)
      H3RT_CUDA_CHECK(cudaMemcpyAsync(video_in.data(), d ? d->video_rows : h_video.as<void>(),
                                      video_in.nbytes(), kind, s));
    if (Na)
      H3RT_CUDA_CHECK(cudaMemcpyAsync(audio_in.data(), d ? d->audio_rows : h_audio.as<void>(),
                                      audio_in.nbytes(), kind, s));
  }

  static cudaStream_t caller(const ForwardInputs& in) {
    return reinterpret_cast<cudaStream_t>(in.device->stream);
  }

  // The velocities to pinned host memory, or (checked on the device when checks are on) into
  // the caller's buffers, the caller's stream then ordered after them.
  void download_velocities(const ForwardInputs& in) {
    const DeviceIO* d = in.device;
    if (d) {
      const int tag = FiniteFlags::kBlockTag + static_cast<int>(m.blocks.size());
      finite.flag(video_v.data(), false, video_v.numel(), tag, s);
      finite.flag(audio_v.data(), false, audio_v.numel(), tag, s);
    }
    const auto kind = d ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost;
    if (Nv)
      H3RT_CUDA_CHECK(cudaMemcpyAsync(d ? d->video_velocity : h_video_v.as<void>(), video_v.data(),
                                      video_v.nbytes(), kind, s));
    if (Na)
      H3RT_CUDA_CHECK(cudaMemcpyAsync(d ? d->audio_velocity : h_audio_v.as<void>(), audio_v.data(),
                                      audio_v.nbytes(), kind, s));
    if (!d) return;
    H3RT_CUDA_CHECK(cudaEventRecord(ev_done, s));
    H3RT_CUDA_CHECK(cudaStreamWaitEvent(caller(in), ev_done, 0));
  }

  // Block i's weights: the model's, or streamed into a slot (the wait for its copy timed as
  // the stage "weight_wait": the time the compute stream stalled on the copy stream).
  const DeviceBlock& block_weights(int64_t i, bool timed) {
    if (!weights) return m.blocks[i];
    mark(timed, "weight_wait");
    return weights->acquire(i, s);
  }

  // Blocks [first, last) on the packed stream, each after its AdaLN table. Chained
  // (BlockChain): each block leaves its gate_mlp residual to the next, so the tables alternate
  // between b.table and table_alt; not while finite checks run, which check x after every block.
  void enqueue_blocks(int64_t first, int64_t last, int64_t M, bool timed) {
    bf16* x = b.x.ptr<bf16>();
    if (weights) weights->begin(first, last, s, timed);
    const bool chained = chain_blocks() && !finite.on;
    const bf16* pending = nullptr;
    for (int64_t i = first; i < last; ++i) {
      const DeviceBlock& w = block_weights(i, timed);
      mark(timed, "adaln_tables");
      // [M, 18H] is the [3M, 6H] table: row m*3 + modality.
      bf16* table = ((i - first) % 2 && chained ? table_alt : b.table).ptr<bf16>();
      adaln_table(w.adaln, table, M, false);
      mark(timed, "blocks");
      const bool sparse_block = sparse.sparse_block(i);
      ops::SparseCheckCudaParams chk;
      const model::BlockSparse block_sparse = sparse.block(i, chk);
      const BlockChain chain{table, pending, chained && i + 1 < last};
      block_forward_cuda(m.config, w, b, s, nullptr, false, sparse_block ? &block_sparse : nullptr,
                         &chain);
      pending = chain.defer ? table : nullptr;
      if (weights) weights->release(i, s);
      finite.flag(x, true, S * H, FiniteFlags::kBlockTag + static_cast<int>(i), s);
    }
  }

  // ForwardSessionOptions::chain_blocks unless H3RT_BLOCK_CHAIN=0 (side-by-side timings).
  bool chain_blocks() const { return opt.chain_blocks && env_switch("H3RT_BLOCK_CHAIN", true); }

  // Final layer: [shift | scale] rows chosen by timestep index only, the norm, the heads and
  // the velocities to pinned host memory.
  void enqueue_final(int64_t M, bool timed) {
    const H3Config& c = m.config;
    bf16* x = b.x.ptr<bf16>();
    mark(timed, "adaln_tables");
    adaln_table(m.final_adaln, final_table.data(), M, true);
    mark(timed, "final_heads");
    ops::RmsNormModulateCudaParams n;
    n.x = x;
    n.y = b.n.ptr<bf16>();
    n.weight = m.final_norm.ptr<bf16>();
    if (!curve()) {  // the curve form modulates the head rows in float32 (head())
      n.shift = final_table.ptr<bf16>();
      n.scale = final_table.ptr<bf16>() + H;
      n.row_table_index = tidx.ptr<int64_t>();
    }
    n.rows = S;
    n.dim = H;
    n.table_row_stride = 2 * H;
    n.eps = c.final_norm_eps;
    H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(n, s));
    head(video_head, video0, Nv, video_v);
    head(audio_head, audio0, Na, audio_v);
    sparse.enqueue_readback(b, s);
    mark(timed, nullptr);
  }

  // ---- first-block step caching (h3rt/hybrid.h) ---------------------------------------------

  // Part A: the inputs, block 0 (its input and output kept), the relative L1 of its residual
  // against the cached one, that double to pinned memory.
  void enqueue_block0(int64_t M, bool timed) {
    enqueue_inputs(M, timed);
    step_cache.enqueue_keep_input(b.x.ptr<bf16>(), s);
    enqueue_blocks(0, 1, M, timed);
    mark(timed, "step_cache");
    step_cache.enqueue_compare(b.x.ptr<bf16>(), s);
    mark(timed, nullptr);
  }

  // Part B of a reuse: block 0's output plus the cached residual, then the final layer.
  void enqueue_reuse(int64_t M, bool timed) {
    mark(timed, "step_cache");
    step_cache.enqueue_apply(b.x.ptr<bf16>(), s);
    enqueue_final(M, timed);
  }

  // Part B of a computed step: blocks 1..end, the cache refresh, the final layer.
  void enqueue_rest(int64_t M, bool timed) {
    enqueue_blocks(1, static_cast<int64_t>(m.blocks.size()), M, timed);
    mark(timed, "step_cache");
    step_cache.enqueue_refresh(b.x.ptr<bf16>(), s);
    enqueue_final(M, timed);
  }

  // A step with first-block caching: part A, one host wait for the relative L1 (the decision
  // needs it), then part B. Each part is replayed from its own graph once warm. True when both
  // parts ran from graphs.
  bool cached_step(StepCache& cache, int64_t M) {
    step_cache.ensure(s);
    const bool have = step_cache.holds(cache);
    bool graphed = launch(kPartBlock0, M, [&](bool t) { enqueue_block0(M, t); });
    if (cache.decide(step_cache.wait_rel(have, s))) {
      graphed &= launch(kPartReuse, M, [&](bool t) { enqueue_reuse(M, t); });
      return graphed;
    }
    graphed &= launch(kPartRest, M, [&](bool t) { enqueue_rest(M, t); });
    step_cache.refreshed(cache);
    return graphed;
  }

  // ---- graphs ---------------------------------------------------------------------------

  // A step is one graph (kWholeStep), or with step caching part A and one of two parts B.
  static constexpr int kWholeStep = 0, kPartBlock0 = 1, kPartReuse = 2, kPartRest = 3;
  StepGraphs::Key graph_key(int64_t M, bool checked, int part) const {
    const SparseAttention& c = sparse.cfg();
    return sparse.on() ? StepGraphs::Key{M,
                                         checked,
                                         part,
                                         true,
                                         c.tau,
                                         c.dense_blocks,
                                         c.video_rows_only,
                                         c.band,
                                         c.max_blocks}
                       : StepGraphs::Key{M, checked, part, false, 0.0f, 0, false, 0, 0};
  }

  // Runs one part of a step (or the whole step): from its graph once the same part has run
  // eagerly for this table height (captured on the second call), eagerly before; not on a
  // sparse check step. True when a graph ran.
  bool launch(int part, int64_t M, const std::function<void(bool timed)>& enqueue) {
    const bool use_graph = graphs.launch(graph_key(M, finite.on, part), graph_key(M, false, part),
                                         opt.cuda_graph && !sparse.checking(), opt.stage_timing,
                                         enqueue, s, times.capture_ms);
    timed_any |= opt.stage_timing && !use_graph;
    return use_graph;
  }

  ForwardOutputs forward(const ForwardInputs& in) {
    const auto t_start = Clock::now();
    H3RT_CHECK(same_layout(in.layout, layout),
               "forward: the inputs' layout differs from the session's (", in.layout.seq_len(),
               " vs ", S, " rows)");
    H3RT_NVTX_RANGE("forward_cuda");
    const MemoryScope scope(detail::concat("a forward step of ", S, " rows"));
    times = ForwardStepTimes{};
    if (pending) s.synchronize();  // the last device forward still reads the staging buffers
    pending = false;
    const int64_t M = static_cast<int64_t>(in.plan.timestep.size());
    const auto t_text = Clock::now();
    finite.begin(s);
    prepare_text(in.text);
    if (L) finite.flag(text_rows.ptr<bf16>(), true, L * H, FiniteFlags::kTextTag, s);
    const double text_wall_ms = times.text_refined ? ms_since(t_text) : 0.0;
    prepare_plan(in.plan);
    sparse.prepare(in.sparse, in.sparse_check, b, s);
    prepare_heads(in.schedule);
    prepare_cond(in.cond_video_rows, Ncv, m.video_in, cond_video_emb, cached_cond_video, "video");
    prepare_cond(in.cond_audio_rows, Nca, m.audio_in, cond_audio_emb, cached_cond_audio, "audio");
    times.host_prepare_ms = ms_since(t_start) - text_wall_ms;

    timed_any = false;
    if (opt.stage_timing) timer.begin(s);
    if (weights) weights->reset_timing();
    StepCache* cache = in.step_cache;
    if (cache && (!cache->enabled() || m.blocks.size() < 2)) cache = nullptr;
    H3RT_CUDA_CHECK(cudaEventRecord(ev0, s));
    stage_rows(in);
    const bool use_graph =
        cache ? cached_step(*cache, M) : launch(kWholeStep, M, [&](bool t) { enqueue_step(M, t); });
    download_velocities(in);
    H3RT_CUDA_CHECK(cudaEventRecord(ev1, s));
    finite.end(s);
    compute_ahead(in.next_timesteps);

    const auto t_wait = Clock::now();
    times.graph = use_graph;
    if (in.device && !finite.on && !(sparse.on() && in.sparse_stats) && !sparse.checking()) {
      pending = true;                     // nothing to read back
      times.wall_ms = ms_since(t_start);  // device_ms stays 0: not waited for
      return {};
    }
    s.synchronize();
    finite.throw_if_flagged(static_cast<int>(m.blocks.size()));
    sparse.add_stats(in.sparse_stats);
    sparse.finish_check();
    ForwardOutputs out;
    if (!in.device) {
      out.video_velocity.assign(h_video_v.as<float>(),
                                h_video_v.as<float>() + Nv * m.video_out.out);
      out.audio_velocity.assign(h_audio_v.as<float>(),
                                h_audio_v.as<float>() + Na * m.audio_out.out);
    }
    times.host_finish_ms = ms_since(t_wait);
    float ms = 0;
    H3RT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev0, ev1));
    times.device_ms = ms;
    if (timed_any) times.stage_ms = timer.totals();
    if (weights) {
      times.weights_streamed = true;
      times.weight_copy_ms = weights->copy_ms();
      times.weight_gather_ms = weights->gather_ms();
    }
    times.wall_ms = ms_since(t_start);
    return out;
  }
};

ForwardSessionCuda::ForwardSessionCuda(const DeviceModel& model, const SequenceLayout& layout,
                                       const ForwardSessionOptions& options)
    : impl_(std::make_unique<Impl>(model, layout, options)) {}

ForwardSessionCuda::~ForwardSessionCuda() = default;

ForwardOutputs ForwardSessionCuda::forward(const ForwardInputs& inputs) {
  return impl_->forward(inputs);
}

void ForwardSessionCuda::set_cuda_graph(bool on) {
  impl_->opt.cuda_graph = on;
}

void ForwardSessionCuda::set_check_finite(bool on) {
  impl_->finite.on = on;
}

void ForwardSessionCuda::set_stage_timing(bool on) {
  impl_->opt.stage_timing = on;
}

bool ForwardSessionCuda::matches(const SequenceLayout& layout) const {
  return same_layout(layout, impl_->layout);
}

const ForwardStepTimes& ForwardSessionCuda::last_times() const {
  return impl_->times;
}

bool ForwardSessionCuda::graph_enabled() const {
  return impl_->opt.cuda_graph && !impl_->graphs.failed();
}

int64_t ForwardSessionCuda::graph_nodes() const {
  return impl_->graphs.last_nodes();
}

int64_t ForwardSessionCuda::graph_count() const {
  return impl_->graphs.count();
}

cudaStream_t ForwardSessionCuda::stream() const {
  return impl_->s;
}

}  // namespace h3rt::model
