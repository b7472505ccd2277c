// DeviceLoop on a CUDA device (device_loop.h).
#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "pipeline/device_loop.h"
#include "sampler/noise_cuda.h"
#include "sampler/update_cuda.h"
#include "sampler/update_scalars.h"

namespace h3rt {
namespace {

class CudaLoop final : public DeviceLoop {
 public:
  CudaLoop(int64_t vn, int64_t an) : vn_(vn), an_(an) {
    for (Stream* s : {&video_, &audio_}) {
      const int64_t n = s == &video_ ? vn : an;
      for (Tensor* t : {&s->x, &s->in, &s->v, &s->old})
        *t = cuda::device_empty(DType::f32, {std::max<int64_t>(n, 1)});
    }
    noise_ = cuda::device_empty(DType::f32, {std::max<int64_t>({vn, an, 1})});
  }

  void upload(const resume::LoopState& st) override {
    put(video_.x, st.video_rows, vn_);
    put(audio_.x, st.audio_rows, an_);
    if (st.comfy.has_old) {  // put() refuses missing values rather than stepping from garbage
      put(video_.old, st.comfy.old_video, vn_);
      put(audio_.old, st.comfy.old_audio, an_);
    }
  }

  void download(resume::LoopState& st) override {
    get(video_.x, st.video_rows, vn_);
    get(audio_.x, st.audio_rows, an_);
    if (st.comfy.has_old) {
      get(video_.old, st.comfy.old_video, vn_);
      get(audio_.old, st.comfy.old_audio, an_);
    }
    stream_.synchronize();
  }

  const DeviceIO* io(bool comfy) override {
    io_.video_rows = f(comfy ? video_.in : video_.x);
    io_.audio_rows = f(comfy ? audio_.in : audio_.x);
    io_.video_velocity = f(video_.v);
    io_.audio_velocity = f(audio_.v);
    io_.stream = reinterpret_cast<uintptr_t>(stream_.get());
    return &io_;
  }

  void comfy_inputs(bool bf16_model, float carry) override {
    update::ModelInputCudaParams p;
    p.bf16_model = bf16_model;
    for (Stream* s : {&video_, &audio_}) {
      p.x = f(s->x);
      p.x_in = f(s->in);
      p.n = s == &video_ ? vn_ : an_;
      p.audio = s == &audio_;
      p.carry = p.audio ? carry : 1.0f;
      H3RT_CUDA_CHECK(update::model_input_cuda(p, stream_));
    }
  }

  void comfy_step(const update::Denoised& dv, const update::Denoised& da,
                  const update::ComfyUpdate& u, uint64_t seed, int step) override {
    for (Stream* s : {&video_, &audio_}) {
      const bool audio = s == &audio_;
      update::ComfyStepCudaParams p;
      p.x = f(s->x);
      p.v = f(s->v);
      p.x_net = f(s->in);
      p.old = f(s->old);
      p.n = audio ? an_ : vn_;
      p.d = audio ? da : dv;
      p.u = u;
      if (u.kind == update::ComfyKind::ancestral) {  // streams 3 / 4 at step * n (ancestral_noise)
        GaussianNoiseParams g{seed, audio ? 4u : 3u, int64_t(step) * p.n, f(noise_), p.n};
        H3RT_CUDA_CHECK(gaussian_noise_cuda(g, stream_));
        p.noise = f(noise_);
      }
      H3RT_CUDA_CHECK(update::comfy_step_cuda(p, stream_));
    }
  }

  void euler_step(const SamplerPlan& plan, int step) override {
    const SamplerStep& s = plan.steps.at(step);
    const update::EulerRf cv =
        update::euler_rf_scalars(s.t_video, s.sigma_video, s.sigma_video_next);
    const update::EulerRf ca =
        update::euler_rf_scalars(s.t_audio, s.sigma_audio, s.sigma_audio_next);
    H3RT_CUDA_CHECK(update::euler_rf_cuda({f(video_.x), f(video_.v), vn_, cv}, stream_));
    H3RT_CUDA_CHECK(update::euler_rf_cuda({f(audio_.x), f(audio_.v), an_, ca}, stream_));
  }

  void wait() override { stream_.synchronize(); }

 private:
  struct Stream {
    Tensor x, in, v, old;  // latent, network input, velocity, previous denoised
  };
  static float* f(Tensor& t) { return t.ptr<float>(); }
  void put(Tensor& dst, const FloatVec& src, int64_t n) {
    H3RT_CHECK(static_cast<int64_t>(src.size()) == n, "device loop: ", src.size(),
               " state values, expected ", n);
    H3RT_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), n * sizeof(float),
                                    cudaMemcpyHostToDevice, stream_));
    stream_.synchronize();  // src may be pageable and short-lived
  }
  void get(Tensor& src, FloatVec& dst, int64_t n) {
    dst.resize(static_cast<size_t>(n));
    H3RT_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), n * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream_));
  }

  int64_t vn_, an_;
  cuda::Stream stream_;
  Stream video_, audio_;
  Tensor noise_;
  DeviceIO io_;
};

}  // namespace

std::unique_ptr<DeviceLoop> DeviceLoop::create(int64_t video_n, int64_t audio_n) {
  return std::make_unique<CudaLoop>(video_n, audio_n);
}

}  // namespace h3rt
