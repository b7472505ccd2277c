// The C API (h3rt/h3rt.h) over the C++ pipeline: every entry point catches everything and
// turns it into a status plus the thread's last-error message.
#include <cmath>
#include <cstring>
#include <new>
#include <string>

#include "h3rt/h3rt.h"
#include "h3rt/pipeline.h"
#include "h3rt/selftest.h"

struct h3rt_model {
  std::unique_ptr<h3rt::Denoiser> denoiser;
  std::string identity;  // model_identity(): recorded in resume files, checked on resume
  std::string lora_skipped;
};

namespace {

thread_local std::string g_last_error;
thread_local std::string g_selftest_json;  // h3rt_selftest's report

struct InvalidArgument : h3rt::Error {
  using h3rt::Error::Error;
};

#define C_CHECK(cond, msg) \
  if (!(cond)) throw InvalidArgument(msg)

template <class F>
h3rt_status guarded(F&& f) {
  try {
    f();
    return H3RT_OK;
  } catch (const InvalidArgument& e) {
    g_last_error = e.what();
    return H3RT_ERROR_INVALID_ARGUMENT;
  } catch (const h3rt::Cancelled& e) {
    g_last_error = e.what();
    return H3RT_ERROR_CANCELLED;
  } catch (const h3rt::OutOfMemory& e) {  // host or device, with what was being allocated
    g_last_error = e.what();
    return H3RT_ERROR_OUT_OF_MEMORY;
  } catch (const std::bad_alloc&) {
    g_last_error = "out of host memory";
    return H3RT_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return H3RT_ERROR_RUNTIME;
  } catch (...) {
    g_last_error = "unknown error";
    return H3RT_ERROR_RUNTIME;
  }
}

h3rt::DenoiserOptions options_of(const h3rt_model_options* o) {
  h3rt::DenoiserOptions d;
  if (!o) return d;
  try {
    if (o->device) d.device = h3rt::parse_device(o->device, "options.device");
    if (o->precision) d.precision = h3rt::parse_precision(o->precision, "options.precision");
    if (o->attention) d.attention = h3rt::parse_attention(o->attention, "options.attention");
    if (o->fp8_activations)
      d.fp8_activations =
          h3rt::parse_fp8_activations(o->fp8_activations, "options.fp8_activations");
    if (o->check_finite)
      d.check_finite = h3rt::parse_check_finite(o->check_finite, "options.check_finite");
    if (o->device_memory_limit)
      d.device_memory_limit =
          h3rt::parse_memory_size(o->device_memory_limit, "options.device_memory_limit");
    if (o->weight_stream_source)
      d.weight_stream_source =
          h3rt::parse_weight_stream_source(o->weight_stream_source, "options.weight_stream_source");
  } catch (const h3rt::Error& e) {
    throw InvalidArgument(e.what());
  }
  d.cuda_graphs = o->cuda_graphs != 0;
  C_CHECK(o->num_loras >= 0 && (o->num_loras == 0 || o->lora_paths),
          "options.num_loras: need >= 0, with options.lora_paths holding that many paths");
  for (int i = 0; i < o->num_loras; ++i) {
    const std::string at = "options.lora_paths[" + std::to_string(i) + "]";
    C_CHECK(o->lora_paths[i] && *o->lora_paths[i], at + ": a null or empty path");
    const double strength = o->lora_strengths ? o->lora_strengths[i] : 1.0;
    C_CHECK(std::isfinite(strength), at + ": its strength is not finite");
    d.loras.push_back({o->lora_paths[i], strength});
  }
  d.lora_skip_unmatched = o->lora_skip_unmatched != 0;
  if (o->load_progress) {
    const h3rt_load_progress_fn fn = o->load_progress;
    void* user = o->load_progress_user;
    d.load_progress = [fn, user](int done, int total) { fn(done, total, user); };
  }
  return d;
}

h3rt_model* new_model(const h3rt::ModelSource& s, const h3rt_model_options* options) {
  const h3rt::DenoiserOptions d = options_of(options);
  auto* m = new h3rt_model{h3rt::Denoiser::create(s, d), h3rt::model_identity(s, d), {}};
  for (const std::string& w : m->denoiser->lora_report().warnings) m->lora_skipped += w + "\n";
  return m;
}

// The flow shifts of a C call, checked (finite, > 0); with zero_default, 0 takes 12 or 3.
h3rt::FlowShifts shifts_of(double video, double audio, const char* what, bool zero_default) {
  h3rt::FlowShifts f;
  if (video != 0 || !zero_default) f.video = video;
  if (audio != 0 || !zero_default) f.audio = audio;
  try {
    h3rt::check_flow_shifts(f);
  } catch (const h3rt::Error& e) {
    throw InvalidArgument(std::string(what) + ": " + e.what());
  }
  return f;
}

h3rt::SequenceLayout layout_of(const h3rt_layout& l) {
  C_CHECK(l.text_len >= 1 && l.audio_len >= 0 && l.frames >= 1 && l.height >= 2 && l.width >= 2 &&
              l.height % 2 == 0 && l.width % 2 == 0,
          "layout: need text_len >= 1, audio_len >= 0, frames >= 1 and even height, width >= 2");
  h3rt::SequenceLayout s =
      h3rt::make_t2va_layout(l.text_len, l.audio_len, l.frames, l.height, l.width);
  const int64_t S = s.seq_len();
  auto copy = [](auto* src, auto& dst) {
    if (src) std::memcpy(dst.data(), src, dst.size() * sizeof(dst[0]));
  };
  copy(l.text_indices, s.text_indices);
  copy(l.audio_indices, s.audio_indices);
  copy(l.video_indices, s.video_indices);
  copy(l.token_tags, s.token_tags);
  copy(l.position_ids, s.position_ids);
  for (const auto* idx : {&s.text_indices, &s.audio_indices, &s.video_indices})
    for (int64_t r : *idx) C_CHECK(r >= 0 && r < S, "layout: a row index lies outside [0, S)");
  return s;
}

h3rt::TimestepPlan plan_of(const h3rt_timesteps& t, int64_t S) {
  C_CHECK(t.timestep && t.timestep_indices && t.num_timesteps >= 1,
          "timesteps: need timestep [M >= 1] and timestep_indices [S]");
  h3rt::TimestepPlan p;
  p.timestep.assign(t.timestep, t.timestep + t.num_timesteps);
  p.timestep_indices.assign(t.timestep_indices, t.timestep_indices + S);
  for (int64_t i : p.timestep_indices)
    C_CHECK(i >= 0 && i < t.num_timesteps, "timesteps: an index lies outside [0, M)");
  return p;
}

void copy_out(const h3rt::FloatVec& v, float* out) {
  if (!v.empty()) std::memcpy(out, v.data(), v.size() * sizeof(float));
}

// The rows and velocities a forward needs: audio ones only when there are audio rows.
bool forward_buffers(int64_t audio_len, const float* video_rows, const float* audio_rows,
                     const float* text, const float* video_velocity, const float* audio_velocity) {
  return video_rows && text && video_velocity && (audio_len == 0 || (audio_rows && audio_velocity));
}

h3rt::RequestOptions request_of(const h3rt_sample_request& r, const h3rt::H3Config& c) {
  h3rt::RequestOptions o;
  o.width = r.width;
  o.height = r.height;
  o.frames = r.frames;
  o.audio_seconds = r.audio_seconds;
  o.text_tokens = r.text_tokens;
  o.seed = r.seed;
  if (r.text) {
    C_CHECK(r.text_len >= 1, "request: text given with text_len < 1");
    o.text.assign(r.text, r.text + r.text_len * c.text_dim);
  }
  return o;
}

h3rt::Request request_from(const h3rt_sample_request& r, const h3rt::H3Config& c) {
  h3rt::Request req = h3rt::make_request(c, request_of(r, c));
  if (r.conditioning) h3rt::condition_request_from_file(req, c, r.conditioning, r.seed);
  return req;
}

}  // namespace

extern "C" {

const char* h3rt_version(void) {
  return H3RT_VERSION_STRING;
}
int h3rt_api_version(void) {
  return H3RT_API_VERSION;
}
const char* h3rt_last_error(void) {
  return g_last_error.c_str();
}

void h3rt_model_options_init(h3rt_model_options* o) {
  if (!o) return;
  *o = h3rt_model_options{};
  o->cuda_graphs = 1;
}

h3rt_status h3rt_model_create(const char* path, const h3rt_model_options* options,
                              h3rt_model** out) {
  return guarded([&] {
    C_CHECK(path && *path && out, "h3rt_model_create: need a checkpoint path and an out pointer");
    *out = nullptr;
    h3rt::ModelSource s;
    s.checkpoint = path;
    *out = new_model(s, options);
  });
}

h3rt_status h3rt_model_create_preset(const char* preset, uint64_t weights_seed,
                                     const h3rt_model_options* options, h3rt_model** out) {
  return guarded([&] {
    C_CHECK(preset && out, "h3rt_model_create_preset: need a preset name and an out pointer");
    *out = nullptr;
    h3rt::ModelSource s;
    s.preset = preset;
    s.weights_seed = weights_seed;
    *out = new_model(s, options);
  });
}

void h3rt_model_free(h3rt_model* model) {
  delete model;
}

h3rt_status h3rt_model_config(const h3rt_model* m, h3rt_config* out) {
  return guarded([&] {
    C_CHECK(m && out, "h3rt_model_config: null model or out");
    const h3rt::H3Config& c = m->denoiser->config();
    *out = h3rt_config{
        c.hidden,   c.heads,          c.head_dim,    c.layers,           c.refiner_layers,
        c.ffn,      c.text_dim,       c.in_channels, c.audio_channels,   c.video_features(),
        c.freq_dim, c.time_embed_dim, c.pdd_heads,   c.adaln_curve_grid, c.adaln_curve_rank};
  });
}

h3rt_status h3rt_model_lora_report(const h3rt_model* m, int* pairs, int* layers,
                                   const char** skipped) {
  return guarded([&] {
    C_CHECK(m, "h3rt_model_lora_report: null model");
    const h3rt::LoraMergeReport& r = m->denoiser->lora_report();
    if (pairs) *pairs = r.pairs;
    if (layers) *layers = r.layers;
    if (skipped) *skipped = m->lora_skipped.c_str();
  });
}

h3rt_status h3rt_model_weight_streaming(const h3rt_model* m, h3rt_weight_streaming* out) {
  return guarded([&] {
    C_CHECK(m, "h3rt_model_weight_streaming: null model");
    C_CHECK(out, "h3rt_model_weight_streaming: null out");
    const h3rt::WeightStreaming w = m->denoiser->weight_streaming();
    *out = h3rt_weight_streaming{};
    out->device_memory_limit = w.limit;
    out->limit_auto = w.limit_auto;
    out->streamed = w.streamed;
    out->streamed_at_load = w.streamed_at_load;
    out->slots = w.slots;
    out->streamed_blocks = w.streamed_blocks;
    out->slot_bytes = w.slot_bytes;
    out->host_bytes = w.host_bytes;
    out->h2d_bytes_per_step = w.h2d_bytes_per_step;
    out->resident_weight_bytes = w.resident_weight_bytes;
    out->planned_device_bytes = w.planned_device_bytes;
    out->load_peak_device_bytes = w.load_peak_device_bytes;
    out->source = w.source == "pinned" ? "pinned" : w.source == "file" ? "file" : "";
  });
}

namespace {

// h3rt_forward and h3rt_forward_device: host rows, or `io` (device rows and velocities, in
// which case the returned velocities are empty).
h3rt::ForwardOutputs forward_rows(h3rt_model* m, const h3rt_layout* layout,
                                  const h3rt_timesteps* ts, const float* video_rows,
                                  const float* audio_rows, const float* text,
                                  const h3rt::DeviceIO* io) {
  const h3rt::SequenceLayout l = layout_of(*layout);
  const h3rt::TimestepPlan plan = plan_of(*ts, l.seq_len());
  h3rt::SigmaSchedule schedule{ts->sigma, {}};
  if (ts->num_sample_sigmas > 0) {
    C_CHECK(ts->sample_sigmas, "timesteps: num_sample_sigmas > 0 with no sample_sigmas");
    schedule.sample_sigmas.assign(ts->sample_sigmas, ts->sample_sigmas + ts->num_sample_sigmas);
  }
  h3rt::ForwardInputs in{l,          plan, video_rows,
                         audio_rows, text, ts->num_sample_sigmas > 0 ? &schedule : nullptr};
  in.device = io;
  return m->denoiser->forward(in);
}

}  // namespace

h3rt_status h3rt_forward(h3rt_model* m, const h3rt_layout* layout, const h3rt_timesteps* ts,
                         const float* video_rows, const float* audio_rows, const float* text,
                         float* video_velocity, float* audio_velocity) {
  return guarded([&] {
    C_CHECK(m && layout && ts &&
                forward_buffers(layout->audio_len, video_rows, audio_rows, text, video_velocity,
                                audio_velocity),
            "h3rt_forward: null argument");
    const h3rt::ForwardOutputs v =
        forward_rows(m, layout, ts, video_rows, audio_rows, text, nullptr);
    copy_out(v.video_velocity, video_velocity);
    copy_out(v.audio_velocity, audio_velocity);
  });
}

h3rt_status h3rt_forward_device(h3rt_model* m, const h3rt_layout* layout, const h3rt_timesteps* ts,
                                const float* video_rows, const float* audio_rows, const float* text,
                                float* video_velocity, float* audio_velocity, void* stream) {
  return guarded([&] {
    C_CHECK(m && layout && ts &&
                forward_buffers(layout->audio_len, video_rows, audio_rows, text, video_velocity,
                                audio_velocity),
            "h3rt_forward_device: null argument");
    const h3rt::DeviceIO io{video_rows, audio_rows, video_velocity, audio_velocity,
                            reinterpret_cast<uintptr_t>(stream)};
    forward_rows(m, layout, ts, nullptr, nullptr, text, &io);
  });
}

h3rt_status h3rt_forward_t2va_shifted(h3rt_model* m, int64_t text_len, int64_t audio_len,
                                      int64_t frames, int64_t height, int64_t width, float sigma,
                                      double video_shift, double audio_shift,
                                      const float* video_rows, const float* audio_rows,
                                      const float* text, float* video_velocity,
                                      float* audio_velocity) {
  return guarded([&] {
    C_CHECK(m && forward_buffers(audio_len, video_rows, audio_rows, text, video_velocity,
                                 audio_velocity),
            "h3rt_forward_t2va: null argument");
    const h3rt::FlowShifts shifts =
        shifts_of(video_shift, audio_shift, "h3rt_forward_t2va_shifted", false);
    const h3rt_layout l{text_len, audio_len, frames,  height,  width,
                        nullptr,  nullptr,   nullptr, nullptr, nullptr};
    const h3rt::ForwardOutputs v = h3rt::forward_at_sigma(*m->denoiser, layout_of(l), video_rows,
                                                          audio_rows, text, sigma, {}, shifts);
    copy_out(v.video_velocity, video_velocity);
    copy_out(v.audio_velocity, audio_velocity);
  });
}

h3rt_status h3rt_forward_t2va(h3rt_model* m, int64_t text_len, int64_t audio_len, int64_t frames,
                              int64_t height, int64_t width, float sigma, const float* video_rows,
                              const float* audio_rows, const float* text, float* video_velocity,
                              float* audio_velocity) {
  return h3rt_forward_t2va_shifted(m, text_len, audio_len, frames, height, width, sigma,
                                   h3rt::kVideoShift, h3rt::kAudioShift, video_rows, audio_rows,
                                   text, video_velocity, audio_velocity);
}

void h3rt_sample_request_init(h3rt_sample_request* r) {
  if (!r) return;
  *r = h3rt_sample_request{};
  r->seed = 440420;
  r->steps = 8;
  r->dense_steps = 10;
  r->dense_blocks = 2;
  r->step_cache_max = 3;
  r->sparse_check_bound = 0.05;
}

h3rt_status h3rt_sample_shapes(const h3rt_model* m, const h3rt_sample_request* r,
                               int64_t video_shape[5], int64_t audio_shape[3]) {
  return guarded([&] {
    C_CHECK(m && r && video_shape && audio_shape, "h3rt_sample_shapes: null argument");
    const h3rt::H3Config& c = m->denoiser->config();
    const h3rt::SequenceLayout l = request_from(*r, c).layout;
    const int64_t v[5] = {1, c.in_channels, l.frames, l.height, l.width};
    const int64_t a[3] = {2, c.audio_channels, l.audio_len};
    std::memcpy(video_shape, v, sizeof v);
    std::memcpy(audio_shape, a, sizeof a);
  });
}

h3rt_status h3rt_sample(h3rt_model* m, const h3rt_sample_request* r, float* video_latents,
                        int64_t video_capacity, float* audio_latents, int64_t audio_capacity) {
  return guarded([&] {
    C_CHECK(m && r && video_latents && audio_latents, "h3rt_sample: null argument");
    const h3rt::H3Config& c = m->denoiser->config();
    h3rt::Request req = request_from(*r, c);
    const int64_t nv = req.layout.video_rows() * c.video_features();
    const int64_t na = req.layout.audio_rows() * c.audio_channels;
    C_CHECK(video_capacity >= nv && audio_capacity >= na,
            "h3rt_sample: output capacities too small (need " + std::to_string(nv) + " video and " +
                std::to_string(na) + " audio floats; see h3rt_sample_shapes)");
    h3rt::SampleOptions so;
    so.steps = r->steps;
    so.noise_seed = r->seed;  // as `h3rt sample --seed`: euler_ancestral's noise, sparse checks
    const h3rt::FlowShifts shifts = shifts_of(r->video_shift, r->audio_shift, "request", true);
    so.video_shift = shifts.video;
    so.audio_shift = shifts.audio;
    C_CHECK(r->checkpoint_every >= 0, "request.checkpoint_every must be >= 0");
    so.checkpoint_every = r->checkpoint_every;
    so.resume_path = r->resume ? r->resume : "";
    so.checkpoint_path = r->checkpoint_file ? r->checkpoint_file : so.resume_path;
    C_CHECK(so.checkpoint_every == 0 || !so.checkpoint_path.empty(),
            "request.checkpoint_every needs request.checkpoint_file (or request.resume)");
    so.model_identity = m->identity;
    try {  // options of the request: H3RT_ERROR_INVALID_ARGUMENT, naming the field
      if (r->sampler) so.sampler = h3rt::parse_sampler(r->sampler, "sampler");
      if (r->scheduler) so.scheduler = h3rt::parse_scheduler(r->scheduler, "scheduler");
      const h3rt::HybridPolicy p =
          h3rt::hybrid_policy({r->sparse_attention, r->dense_steps, r->dense_blocks, r->step_cache,
                               r->step_cache_max, r->sparse_check, r->sparse_check_bound});
      so.hybrid = p.hybrid;
      so.step_cache = p.step_cache;
    } catch (const h3rt::Error& e) {
      throw InvalidArgument(e.what());
    }
    if (r->progress)
      so.progress = [r](int step, int steps, double s) {
        return r->progress(step, steps, s, r->progress_user) != 0;
      };
    const h3rt::SampleResult res = h3rt::sample(*m->denoiser, std::move(req), so);
    copy_out(res.video_latents, video_latents);
    copy_out(res.audio_latents, audio_latents);
  });
}

h3rt_status h3rt_selftest(uint64_t seed, int* passed, const char** report_json) {
  return guarded([&] {
    C_CHECK(passed, "h3rt_selftest: passed is NULL");
    h3rt::SelftestOptions o;
    o.seed = seed;
    const h3rt::SelftestReport r = h3rt::selftest(o);
    g_selftest_json = h3rt::to_json(r).dump();
    *passed = r.passed() ? 1 : 0;
    if (report_json) *report_json = g_selftest_json.c_str();
  });
}

}  // extern "C"
