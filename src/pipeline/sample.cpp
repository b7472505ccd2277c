// The sampling loop (the reference's Euler on its own grids, or ComfyUI's samplers over the
// simple schedule with the audio carried), with checkpoints and resume, and the single forward
// at a sigma, over any Denoiser.
#include <chrono>
#include <cmath>

#include "h3rt/formats.h"
#include "h3rt/pipeline.h"
#include "pipeline/device_loop.h"
#include "pipeline/inpaint.h"
#include "pipeline/resume.h"
#include "sampler/update_scalars.h"

namespace h3rt {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void check_request(const Request& r, const H3Config& c) {
  const SequenceLayout& L = r.layout;
  H3RT_CHECK(static_cast<int64_t>(r.video_rows.size()) == L.video_rows() * c.video_features(),
             "request: ", r.video_rows.size(), " video values, expected [", L.video_rows(), ", ",
             c.video_features(), "]");
  H3RT_CHECK(static_cast<int64_t>(r.audio_rows.size()) == L.audio_rows() * c.audio_channels,
             "request: ", r.audio_rows.size(), " audio values, expected [", L.audio_rows(), ", ",
             c.audio_channels, "]");
  H3RT_CHECK(static_cast<int64_t>(r.text.size()) == L.text_len * c.text_dim,
             "request: ", r.text.size(), " text values, expected [", L.text_len, ", ", c.text_dim,
             "]");
}

// Step i's per-row timesteps: the sampler's plan, or for a comfy request the conditioned plan at
// the step's timesteps (condition rows pinned near 1; they ride along, never updated; masked
// rows at min(1 - m sigma, pin) with the model's sigma, f32(f32(sigma 1000) / 1000)).
TimestepPlan step_plan(const Request& r, const SamplerPlan& p, int i, const RowMasks& masks) {
  const SamplerStep& s = p.steps[i];
  if (!r.comfy) return s.plan;
  const float sigma_model =
      p.scheduler == Scheduler::simple
          ? comfy_model_times(s.sigma_video, p.shift_video_f64, p.shift_audio_f64).sigma_model
          : s.sigma_video;
  return make_conditioned_plan(r.layout, {sigma_model, s.t_video, s.t_audio}, r.conditioning.aug,
                               masks);
}

const float* or_null(const FloatVec& v) {
  return v.empty() ? nullptr : v.data();
}

void check_options(const SampleOptions& o) {
  H3RT_CHECK(o.steps >= 1 && o.steps <= 1000, "steps must be in [1, 1000], got ", o.steps);
  H3RT_CHECK(o.scheduler == Scheduler::simple || o.sampler == SamplerKind::euler, "sampler ",
             sampler_name(o.sampler),
             " runs on the simple scheduler (ComfyUI's loop); the "
             "diffusers scheduler's sampler is euler");
  H3RT_CHECK(o.checkpoint_every >= 0, "checkpoint_every must be >= 0, got ", o.checkpoint_every);
  H3RT_CHECK(o.checkpoint_every == 0 || !o.checkpoint_path.empty(),
             "checkpoint_every needs a checkpoint path");
  check_hybrid_options(o.hybrid, o.step_cache);
}

SamplerPlan plan_for(const SequenceLayout& L, const SampleOptions& o) {
  if (o.scheduler == Scheduler::simple)
    return make_comfy_plan(L, o.sampler, o.steps, o.video_shift, o.audio_shift);
  return make_sampler_plan(L, o.steps + 1, static_cast<float>(o.video_shift),
                           static_cast<float>(o.audio_shift));
}

// One step of either loop on the state's rows.
class Stepper {
 public:
  Stepper(Denoiser& d, const Request& r, const SamplerPlan& p, const SampleOptions& o,
          const Inpaint& inpaint, DeviceLoop* dev)
      : d_(d),
        dev_(dev),
        req_(r),
        plan_(p),
        seed_(o.noise_seed),
        bf16_(d.precision() == Precision::bf16),
        hybrid_(o.hybrid),
        cache_(o.step_cache),
        check_(o.hybrid.check, o.noise_seed),
        inpaint_(inpaint),
        masks_(row_masks(r.conditioning, r.layout)) {}

  const std::vector<HybridStep>& hybrid_steps() const { return records_; }

  StageSeconds run(int i, resume::LoopState& st) {
    StageSeconds t;
    auto t0 = Clock::now();
    const SigmaSchedule schedule = sigma_schedule(plan_, i);  // for PDD head banks
    const bool comfy = plan_.scheduler == Scheduler::simple;
    if (dev_ && comfy) dev_->comfy_inputs(bf16_, plan_.audio_carry[i]);
    if (!dev_ && comfy) model_inputs(i, st);
    const float* video_in = dev_ ? nullptr : comfy ? video_in_.data() : st.video_rows.data();
    const float* audio_in = dev_ ? nullptr : comfy ? audio_in_.data() : st.audio_rows.data();
    const TimestepPlan tplan =
        next_step_ == i ? std::move(next_plan_) : step_plan(req_, plan_, i, masks_);
    // The next step's plan now, so that the forward computes its time embedding while the
    // device works (ForwardInputs::next_timesteps).
    next_step_ = i + 1 < static_cast<int>(plan_.steps.size()) ? i + 1 : -1;
    if (next_step_ >= 0) next_plan_ = step_plan(req_, plan_, next_step_, masks_);
    ForwardInputs in{req_.layout,
                     tplan,
                     video_in,
                     audio_in,
                     req_.text.data(),
                     &schedule,
                     or_null(req_.cond.video),
                     or_null(req_.cond.audio)};
    in.step = i;  // names the step in finite-check errors; check_finite first checks step 0
    if (next_step_ >= 0) in.next_timesteps = &next_plan_.timestep;
    if (dev_) in.device = dev_->io(comfy);
    HybridStep rec;
    SparseStats stats;
    rec.sparse = sparse_step(hybrid_, i);
    if (rec.sparse) {
      in.sparse = &hybrid_.sparse;
      in.sparse_stats = &stats;
      if (check_.options().enabled()) {
        check_.begin(i, sparse_check_step(hybrid_, i));
        in.sparse_check = &check_;
      }
    }
    if (cache_.enabled()) in.step_cache = &cache_;
    t.packing = seconds_since(t0);
    t0 = Clock::now();
    ForwardOutputs v = d_.forward(in);
    inpaint_.mask_velocities(v);
    t.denoiser = seconds_since(t0);
    if (stats.key_blocks_total > 0) rec.sparse_fraction = stats.fraction();
    if (cache_.enabled()) rec.cache = cache_.last();
    if (in.sparse_check && check_.checking()) rec.check = check_.last();
    records_.push_back(rec);
    t0 = Clock::now();
    if (dev_) return update_on_device(i, st, t, t0);
    const auto vn = static_cast<int64_t>(st.video_rows.size());
    const auto an = static_cast<int64_t>(st.audio_rows.size());
    if (comfy) {
      FloatVec vden(vn), aden(an);
      comfy_denoised(x_video_.data(), v.video_velocity.data(), vn, plan_.steps[i].sigma_video,
                     vden.data());
      comfy_denoised_carried(plan_, i, x_audio_.data(), audio_in_.data(), v.audio_velocity.data(),
                             an, bf16_, aden.data());
      inpaint_.denoised(vden, aden);
      comfy_sampler_step(plan_, i, st.comfy, st.video_rows.data(), vden.data(), vn,
                         st.audio_rows.data(), aden.data(), an, seed_);
    } else {
      sampler_step(plan_, i, st.video_rows.data(), v.video_velocity.data(), vn,
                   st.audio_rows.data(), v.audio_velocity.data(), an);
    }
    t.sampler_update = seconds_since(t0);
    return t;
  }

 private:
  // The step's update queued on the device after its forward (sampler_update: the host's part),
  // then the wait for both (counted as the denoiser's). The host keeps the multistep state's
  // scalars; its buffers stay on the device.
  StageSeconds update_on_device(int i, resume::LoopState& st, StageSeconds t,
                                Clock::time_point t0) {
    if (plan_.scheduler == Scheduler::simple) {
      dev_->comfy_step(update::video_denoised_scalars(plan_, i),
                       update::audio_denoised_scalars(plan_, i, bf16_),
                       update::comfy_update_scalars(plan_, i, st.comfy), seed_, i);
      update::advance_comfy_state(plan_, i, st.comfy);
    } else {
      dev_->euler_step(plan_, i);
    }
    t.sampler_update = seconds_since(t0);
    t0 = Clock::now();
    dev_->wait();
    t.denoiser += seconds_since(t0);
    return t;
  }

  // The state the model is called on (the masks' blend with the clean latent), cast to the
  // model dtype as ComfyUI casts it, the network given the uncarried audio.
  void model_inputs(int i, const resume::LoopState& st) {
    x_video_ = st.video_rows;
    x_audio_ = st.audio_rows;
    inpaint_.model_state(i, x_video_, x_audio_);
    video_in_ = x_video_;
    if (bf16_)
      for (float& x : video_in_) x = round_bf16(x);
    audio_in_.resize(x_audio_.size());
    comfy_audio_model_input(x_audio_.data(), static_cast<int64_t>(x_audio_.size()),
                            plan_.audio_carry[i], bf16_, audio_in_.data());
  }

  Denoiser& d_;
  DeviceLoop* dev_;  // null: the state on the host
  const Request& req_;
  const SamplerPlan& plan_;
  uint64_t seed_;
  bool bf16_;
  FloatVec x_video_, x_audio_;    // the state of the model call (comfy loop)
  FloatVec video_in_, audio_in_;  // what the network gets
  const HybridOptions& hybrid_;
  StepCache cache_;    // this run's: starts empty
  SparseCheck check_;  // this run's: every head sparse at the start
  const Inpaint& inpaint_;
  const RowMasks masks_;
  std::vector<HybridStep> records_;
  TimestepPlan next_plan_;  // step next_step_'s plan (-1: none), made one step early
  int next_step_ = -1;
};

resume::LoopState initial_state(const Request& r, const SamplerPlan& p, const Inpaint& inpaint) {
  resume::LoopState st;
  st.video_rows = r.video_rows;
  st.audio_rows = r.audio_rows;
  if (p.scheduler == Scheduler::simple) {  // noise_scaling at sigma_0 (1 for integer shifts)
    comfy_initial_latent(p.video_sigmas[0], st.video_rows.data(),
                         static_cast<int64_t>(st.video_rows.size()));
    comfy_initial_latent(p.video_sigmas[0], st.audio_rows.data(),
                         static_cast<int64_t>(st.audio_rows.size()));
    inpaint.initial(st.video_rows, st.audio_rows);  // masked streams: with the clean latent
  }
  return st;
}

// Asks the callback and the flag whether to go on; on a stop, saves the state (when a
// checkpoint path is set) and throws Cancelled.
struct Control {
  const SampleOptions& o;
  const resume::RunKeys& keys;
  Shape video_rows, audio_rows;
  int total;
  Clock::time_point start = Clock::now();

  DeviceLoop* dev = nullptr;  // where the state lives when not on the host

  void save(resume::LoopState& st) const {
    if (dev) dev->download(st);
    resume::write(o.checkpoint_path, keys, st, video_rows, audio_rows);
  }
  // After a step (stepped) or before the first one.
  void check(resume::LoopState& st, bool stepped) const {
    const int done = st.steps_done;
    if (stepped && o.checkpoint_every > 0 && done % o.checkpoint_every == 0 && done < total)
      save(st);
    const bool stop_flag = o.cancel && o.cancel->load();
    const bool stop_cb = o.progress && !o.progress(done, total, seconds_since(start));
    if ((!stop_flag && !stop_cb) || done == total) return;  // nothing left to stop
    std::string msg =
        "sampling cancelled after step " + std::to_string(done) + " of " + std::to_string(total);
    if (stepped && !o.checkpoint_path.empty()) {
      save(st);
      msg += "; resume file " + o.checkpoint_path;
    }
    throw Cancelled(msg);
  }
};

// The device loop where it applies (SampleOptions::device_loop), holding the state `st`.
std::unique_ptr<DeviceLoop> device_loop_for(const Denoiser& d, const SampleOptions& o,
                                            const Inpaint& inpaint, const resume::LoopState& st) {
  if (!o.device_loop || !d.device_rows() || inpaint.active()) return nullptr;
  std::unique_ptr<DeviceLoop> dev = DeviceLoop::create(static_cast<int64_t>(st.video_rows.size()),
                                                       static_cast<int64_t>(st.audio_rows.size()));
  if (dev) dev->upload(st);
  return dev;
}

SampleResult finish(const SamplerPlan& plan, resume::LoopState& st, const H3Config& c,
                    const SequenceLayout& L, const Inpaint& inpaint,
                    std::vector<StageSeconds> stages) {
  const auto t0 = Clock::now();
  if (plan.scheduler == Scheduler::simple)
    comfy_uncarry_audio(plan.audio_scale, st.audio_rows.data(),
                        static_cast<int64_t>(st.audio_rows.size()));
  // ComfyUI's last step lands on the clean latent where m = 0 up to rounding; h3rt keeps it exact.
  inpaint.keep_clean(st.video_rows, st.audio_rows);
  SampleResult res;
  res.video_latents =
      unpatchify_video(st.video_rows.data(), c.in_channels, L.frames, L.height, L.width);
  res.audio_latents = audio_rows_to_latents(st.audio_rows.data(), c.audio_channels, L.audio_len);
  res.video_shape = {1, c.in_channels, L.frames, L.height, L.width};
  res.audio_shape = {2, c.audio_channels, L.audio_len};
  res.video_sigmas = plan.video_sigmas;
  res.stages = std::move(stages);
  if (!res.stages.empty()) res.stages.back().output_transform = seconds_since(t0);
  return res;
}

}  // namespace

SampleResult sample(Denoiser& denoiser, Request req, const SampleOptions& o) {
  check_options(o);
  const H3Config& c = denoiser.config();
  check_request(req, c);
  const bool masked = !req.conditioning.video_mask.empty() || !req.conditioning.audio_mask.empty();
  H3RT_CHECK(!masked || o.scheduler == Scheduler::simple,
             "sample: denoise masks run in ComfyUI's loop: use scheduler simple (--scheduler "
             "simple), not ",
             scheduler_name(o.scheduler));
  const SequenceLayout& L = req.layout;
  const SamplerPlan plan = plan_for(L, o);
  const Inpaint inpaint(req, c, plan);
  const int evals = static_cast<int>(plan.steps.size());
  const resume::RunKeys keys = resume::run_keys(denoiser, req, o);
  Control ctl{
      o, keys, {L.video_rows(), c.video_features()}, {L.audio_rows(), c.audio_channels}, evals};
  resume::LoopState st = o.resume_path.empty() ? initial_state(req, plan, inpaint)
                                               : resume::read(o.resume_path, keys, ctl.video_rows,
                                                              ctl.audio_rows, evals);
  const int first = st.steps_done;
  const std::unique_ptr<DeviceLoop> dev = device_loop_for(denoiser, o, inpaint, st);
  ctl.dev = dev.get();
  ctl.check(st, false);
  Stepper stepper(denoiser, req, plan, o, inpaint, dev.get());
  std::vector<StageSeconds> stages;
  for (int i = first; i < evals; ++i) {
    stages.push_back(stepper.run(i, st));
    st.steps_done = i + 1;
    ctl.check(st, true);
  }
  if (dev) dev->download(st);
  SampleResult res = finish(plan, st, c, L, inpaint, std::move(stages));
  res.resumed_steps = first;
  res.hybrid_steps = stepper.hybrid_steps();
  res.device_loop = dev != nullptr;
  return res;
}

ForwardOutputs forward_at_sigma(Denoiser& denoiser, const SequenceLayout& layout,
                                const float* video_rows, const float* audio_rows, const float* text,
                                float sigma, const std::vector<float>& sample_sigmas,
                                const FlowShifts& shifts) {
  H3RT_CHECK(std::isfinite(sigma) && sigma >= 0.0f && sigma <= 1.0f,
             "sigma must lie in [0, 1], got ", sigma);
  check_flow_shifts(shifts);
  const float sigma_a = audio_sigma_from_video(sigma, shifts.video, shifts.audio);
  const TimestepPlan plan = make_timestep_plan(layout, 1.0f - sigma, 1.0f - sigma_a);
  const SigmaSchedule schedule{sigma, sample_sigmas, shifts.video, shifts.audio};
  const ForwardInputs in{layout,     plan, video_rows,
                         audio_rows, text, sample_sigmas.empty() ? nullptr : &schedule};
  return denoiser.forward(in);
}

}  // namespace h3rt
