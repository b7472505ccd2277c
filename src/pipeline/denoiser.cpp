// The Denoiser's two backends: the CPU reference (fp32 or bf16 semantics) and the CUDA forward
// sessions (bf16). Both take the same host inputs and return the same host outputs.
#include <unistd.h>

#include <optional>

#include "h3rt/lora.h"
#include "h3rt/pipeline.h"

#ifdef H3RT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "model/forward_session_cuda.h"
#include "model/lora_cuda.h"
#include "model/model_cuda.h"
#include "model/synthetic_gemm_cuda.h"
#include "model/weight_stream_cuda.h"
#include "ops/attention_sage/attention_sage_cuda.h"
#endif

namespace h3rt {
namespace {

class CpuDenoiser : public Denoiser {
 public:
  CpuDenoiser(H3Model m, Precision p, int fp8_dynamic, CheckFinite check, LoraMergeReport lora = {})
      : model_(std::move(m)), precision_(p) {
    fp8_dynamic_layers_ = fp8_dynamic;
    check_finite_ = check;
    lora_report_ = std::move(lora);
  }
  const H3Config& config() const override { return model_.config; }
  ForwardOutputs forward(const ForwardInputs& in) override {
    H3RT_CHECK(!in.device,
               "device cpu: the rows are in CUDA device memory; a CPU model reads host arrays "
               "(copy them to the host, or load the model with device cuda)");
    const MemoryScope scope(detail::concat("the CPU forward of ", in.layout.seq_len(), " rows"));
    return run_checked(in, [&](bool check) {
      const Probe probe = finite_probe(in.layout);
      return forward_cpu(model_, in, precision_, check ? &probe : nullptr);
    });
  }
  std::string device_name() const override { return "cpu"; }
  Precision precision() const override { return precision_; }

 private:
  H3Model model_;
  Precision precision_;
};

#ifdef H3RT_HAVE_CUDA
// Under a limit, the load's plan (model/weight_stream_plan.h, plan_load); none without one.
std::optional<model::LoadPlan> load_plan(const H3Config& c, const model::BlockStorage& blocks,
                                         const model::BlockStorage& refiner,
                                         const DenoiserOptions& o,
                                         const std::vector<int64_t>& fixed = {}) {
  if (o.device_memory_limit == 0) return std::nullopt;
  return model::plan_load(c, blocks, refiner, o.device_memory_limit, o.attention == Attention::sage,
                          fixed);
}

// The weight_streaming report of a model as loaded (the first forward's plan adds the rest).
WeightStreaming load_report(const model::DeviceModel& m, const std::optional<model::LoadPlan>& lp,
                            const DenoiserOptions& o, const model::LoadMeter& meter,
                            bool auto_limit) {
  WeightStreaming w;
  if (m.streamed)
    w = model::weight_streaming_of(model::with_source(lp->plan, m.streamed->source),
                                   o.device_memory_limit);
  w.limit = o.device_memory_limit;
  w.limit_auto = auto_limit;
  w.streamed_at_load = m.streamed != nullptr;
  w.load_peak_device_bytes = meter.peak();
  w.caller_device_bytes = m.caller_block_bytes;
  return w;
}

// DenoiserOptions::load_progress as the model code calls it.
model::BlockProgress block_progress(const DenoiserOptions& o) {
  if (!o.load_progress) return {};
  return [f = o.load_progress](int64_t done, int64_t total) {
    f(static_cast<int>(done), static_cast<int>(total));
  };
}

// A host model (a checkpoint, a state dict) on the device; when the load plan streams, each
// block's matrices go from the host to its pinned image (or stay where they are, for the file
// source), never to the device. Under a limit without the pinned source, the resident blocks
// keep their host sources for a later streaming from the file.
model::DeviceModel upload_for(const H3Model& m, const DenoiserOptions& o,
                              std::optional<model::LoadPlan>& lp) {
  const H3Config& c = m.config;
  if (o.device_memory_limit > 0 && !m.weights.blocks.empty()) {
    const model::BlockStorage refiner = m.weights.refiner.empty()
                                            ? model::uniform_storage(c, model::LinearStorage::bf16)
                                            : model::upload_storage(c, m.weights.refiner[0]);
    model::BlockStorage blocks = model::upload_storage(c, m.weights.blocks[0]);
    blocks.int8_io = model::int8_io_layers(m.weights);
    lp = load_plan(c, blocks, refiner, o, model::in_place_blocks(m));
  }
  // A later streaming from the file reads the resident blocks' mapped sources.
  const bool keep_sources = lp && o.weight_stream_source != WeightStreamSource::pinned;
  if (!lp || !lp->stream) return model::upload_model(m, nullptr, keep_sources, block_progress(o));
  model::BlockImageWriter images(lp->slot, m.weights.blocks.size(),
                                 model::load_stream_source(lp, o.weight_stream_source),
                                 lp->plan.blocks);
  return model::upload_model(m, &images, keep_sources, block_progress(o));
}

class CudaDenoiser : public Denoiser {
 public:
  CudaDenoiser(model::DeviceModel m, const DenoiserOptions& o, int fp8_dynamic,
               LoraMergeReport lora, WeightStreaming load)
      : model_(std::move(m)), streaming_(load) {
    options_.cuda_graph = o.cuda_graphs;
    if (o.attention == Attention::sage) options_.attention = ops::AttentionKernel::sage_8bit;
    fp8_dynamic_layers_ = fp8_dynamic;
    lora_report_ = std::move(lora);
    check_finite_ = o.check_finite;
    limit_ = o.device_memory_limit;
    source_ = o.weight_stream_source;
  }
  const H3Config& config() const override { return model_.config; }
  // One session per request shape: a sampling loop pays the per-request work once.
  ForwardOutputs forward(const ForwardInputs& in) override {
    if (!session_ || !session_->matches(in.layout)) {
      session_.reset();  // its buffers return to the arena first
      plan_streaming(in.layout);
      session_ = std::make_unique<model::ForwardSessionCuda>(model_, in.layout, options_);
    }
    model::check_stream_sources(model_);  // a file it streams from changed: said, not read
    return run_checked(in, [&](bool check) {
      session_->set_check_finite(check);
      return session_->forward(in);
    });
  }
  std::string device_name() const override {
    cudaDeviceProp p{};
    int d = 0;
    cudaGetDevice(&d);
    cudaGetDeviceProperties(&p, d);
    return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ")";
  }
  Precision precision() const override { return Precision::bf16; }
  bool device_rows() const override { return true; }
  std::pair<int64_t, int64_t> device_peak_bytes() const override {
    const auto st = cuda::default_arena().stats();
    return {st.peak_allocated, st.peak_reserved};
  }
  WeightStreaming weight_streaming() const override { return streaming_; }

 private:
  // Before a session for `layout`: the plan under the limit; the blocks move to pinned host
  // memory when the resident model and this shape's activations exceed it (once: they stay).
  void plan_streaming(const SequenceLayout& layout) {
    if (limit_ == 0 && !model_.streamed) return;
    const model::WeightStreamPlan p = model::apply_weight_streaming(
        model_, layout, limit_, options_.attention == ops::AttentionKernel::sage_8bit, source_);
    streaming_ = model::with_load(model::weight_streaming_of(p, limit_), streaming_);
  }

  model::DeviceModel model_;  // outlives session_ (declared first)
  model::ForwardSessionOptions options_;
  std::unique_ptr<model::ForwardSessionCuda> session_;
  int64_t limit_ = 0;
  WeightStreamSource source_ = WeightStreamSource::automatic;
  WeightStreaming streaming_;
};
#endif

Precision precision_for(const DenoiserOptions& o) {
  return o.precision.value_or(o.device == Device::cuda ? Precision::bf16 : Precision::fp32);
}

void check_options(const DenoiserOptions& o) {
  H3RT_CHECK(o.device_memory_limit >= 0 || o.device_memory_limit == kDeviceMemoryAuto,
             "device_memory_limit must be >= 0 bytes (0: no limit) or kDeviceMemoryAuto, got ",
             o.device_memory_limit);
  H3RT_CHECK(o.weight_stream_source == WeightStreamSource::automatic || o.device_memory_limit != 0,
             "weight_stream_source ", weight_stream_source_name(o.weight_stream_source),
             " applies when the block weights stream, under a device_memory_limit; none is set");
  H3RT_CHECK(o.device_memory_limit <= 0 || o.device == Device::cuda,
             "device_memory_limit applies to device cuda (the CPU backend holds its weights in "
             "host memory)");
  H3RT_CHECK(o.attention == Attention::bf16 || o.device == Device::cuda,
             "attention sage runs on the GPU only (device cuda); the CPU runs the reference "
             "attention");
  H3RT_CHECK(o.synthetic_gemm == SyntheticGemm::bf16 || o.device == Device::cuda, "gemm ",
             synthetic_gemm_name(o.synthetic_gemm),
             " quantizes a preset's synthetic weights on the GPU (device cuda); the CPU runs "
             "bf16/fp32 presets");
  H3RT_CHECK(o.int8_group == -1 || o.int8_group == 0 || o.int8_group == 16 || o.int8_group == 64 ||
                 o.int8_group == 256,
             "int8 group size must be 0, 16, 64 or 256 (-1: the preset's), got ", o.int8_group);
#ifdef H3RT_HAVE_CUDA
  if (o.device != Device::cuda) return;
  const std::string no_gpu = cuda::cuda_device_unavailable_reason();
  H3RT_CHECK(no_gpu.empty(), "device cuda: ", no_gpu);
  int dev = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  const std::string arch =
      cuda::arch_support_error(cuda::current_device_cc(), cuda::device_name(dev));
  H3RT_CHECK(arch.empty(), "device cuda: ", arch);
  H3RT_CHECK(
      o.attention != Attention::sage || attention_sage::sage_runs_on(cuda::current_device_cc()),
      "attention sage: the Sage kernels run on sm_90, sm_120 and sm_121 (built for each); ",
      cuda::device_name(dev), " is sm_", cuda::current_device_cc(), ": use attention bf16");
  H3RT_CHECK(precision_for(o) == Precision::bf16,
             "device cuda runs bf16 only; use precision bf16 (or the CPU for fp32)");
#else
  H3RT_CHECK(o.device != Device::cuda,
             "device cuda: this h3rt was built without CUDA (configure with nvcc available)");
#endif
}

#ifdef H3RT_HAVE_CUDA
// The options of a CUDA model with device_memory_limit auto resolved from the GPU's free memory
// now (plus `in_place_bytes`: the caller's tensors the model uses in place).
DenoiserOptions resolve_auto_limit(const DenoiserOptions& o, int64_t in_place_bytes = 0) {
  DenoiserOptions r = o;
  r.device_memory_limit = resolve_device_memory_limit(o.device_memory_limit, in_place_bytes);
  return r;
}
#endif

double host_memory_bytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

// A preset's synthetic host model, refusing up front what the CPU reference cannot hold.
H3Model synthetic_host_model(const ModelSource& s) {
  const std::optional<H3Config> config = config_preset(s.preset);
  H3RT_CHECK(config, "unknown preset '", s.preset, "' (tiny or h3)");
  const WeightBytes need = estimate_weight_bytes(*config);
  const double have = host_memory_bytes();
  H3RT_CHECK(
      need.cpu_bytes < 0.8 * have, "the ", s.preset, " preset has ", need.params / 1e9,
      "B parameters and needs ", need.cpu_bytes / 1e9,
      " GB of host memory on the CPU reference backend; this machine has ", have / 1e9,
      " GB. The CPU backend is the exact oracle for small configs; run large ones on a GPU.");
  return make_synthetic_model(*config, s.weights_seed);
}

// The CUDA backend uploads stored bytes: no f32 copies of float layers on the host.
H3Model load_host_model(const ModelSource& s, Device device) {
  H3RT_CHECK(!s.checkpoint.empty() || s.qkv_override.empty(), "qkv_override needs a checkpoint");
  if (s.checkpoint.empty()) return synthetic_host_model(s);
  LoadOptions opts;
  opts.qkv_layout = s.qkv_layout;
  opts.dense_float_copies = device == Device::cpu;
  if (!s.qkv_override.empty()) opts.overrides.push_back({s.qkv_override, s.qkv_layout});
  return load_model(s.checkpoint, opts);
}

std::vector<Lora> read_loras(const DenoiserOptions& o) {
  std::vector<Lora> loras;
  for (const LoraSpec& s : o.loras) loras.push_back(read_lora(s));
  return loras;
}

LoraOptions lora_options(const DenoiserOptions& o) {
  LoraOptions lo;
  lo.skip_unmatched = o.lora_skip_unmatched;
  return lo;
}

// Merges the options' LoRAs into the host model (the merged layers are what gets placed).
LoraMergeReport merge_option_loras(H3Model& m, const DenoiserOptions& o) {
  if (o.loras.empty()) return {};
  return merge_loras(m, read_loras(o), lora_options(o)).report;  // originals not needed again
}

std::unique_ptr<Denoiser> place(H3Model m, const DenoiserOptions& given) {
  LoraMergeReport lora = merge_option_loras(m, given);
  if (given.check_finite == CheckFinite::every_step) check_weights_finite(m);
  const int fp8_dynamic = set_fp8_activations(m, given.fp8_activations);
  if (given.device == Device::cpu)
    return std::make_unique<CpuDenoiser>(std::move(m), precision_for(given), fp8_dynamic,
                                         given.check_finite, std::move(lora));
#ifdef H3RT_HAVE_CUDA
  // auto: the caller's CUDA tensors this model uses in place count as free memory (they are
  // already allocated, and the plan counts them as the model's), after the LoRAs merged.
  const bool auto_limit = given.device_memory_limit == kDeviceMemoryAuto;
  const DenoiserOptions o = resolve_auto_limit(given, model::in_place_device_bytes(m));
  const model::LoadMeter meter;
  std::optional<model::LoadPlan> lp;
  model::DeviceModel d = upload_for(m, o, lp);
  const WeightStreaming load = load_report(d, lp, o, meter, auto_limit);
  return std::make_unique<CudaDenoiser>(std::move(d), o, fp8_dynamic, std::move(lora), load);
#else
  H3RT_FAIL("unreachable: device cuda without CUDA");
#endif
}

}  // namespace

ForwardOutputs Denoiser::run_checked(const ForwardInputs& in,
                                     const std::function<ForwardOutputs(bool)>& run) {
  const bool first = in.step == 0 || forwards_ == 0;  // a resumed run checks its first step
  ++forwards_;
  const bool check = check_finite_ == CheckFinite::every_step ||
                     (check_finite_ == CheckFinite::first_step && first);
  if (!check) return run(false);
  const H3Config& c = config();
  const SequenceLayout& L = in.layout;
  try {
    // Device rows and velocities: the CUDA session checks them on the device (the packed
    // input, the velocities) instead.
    if (!in.device) {
      check_rows_finite(in.video_rows, L.video_rows(), c.video_features(),
                        "the input video latents (patch rows)");
      check_rows_finite(in.audio_rows, L.audio_rows(), c.audio_channels,
                        "the input audio latents (rows)");
    }
    check_rows_finite(in.text, L.text_len, c.text_dim, "the input text embeddings");
    ForwardOutputs out = run(true);
    if (in.device) return out;
    check_rows_finite(out.video_velocity.data(), L.video_rows(), c.video_features(),
                      "the video velocity (final_layer.video_out)");
    check_rows_finite(out.audio_velocity.data(), L.audio_rows(), c.audio_channels,
                      "the audio velocity (final_layer.audio_out)");
    return out;
  } catch (const NonFinite& e) {
    const std::string when =
        in.step >= 0 ? "step " + std::to_string(in.step + 1) : std::string("forward");
    throw NonFinite(when + ": " + e.what());
  }
}

int64_t resolve_device_memory_limit(int64_t limit, [[maybe_unused]] int64_t in_place_bytes) {
  if (limit != kDeviceMemoryAuto) return limit;
#ifdef H3RT_HAVE_CUDA
  const std::string no_gpu = cuda::cuda_device_unavailable_reason();
  H3RT_CHECK(no_gpu.empty(), "device_memory_limit auto reads the GPU's free memory, and ", no_gpu,
             ": give a size (e.g. 24GB)");
  size_t free_b = 0, total_b = 0;
  H3RT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return auto_device_memory_limit(static_cast<int64_t>(free_b) + in_place_bytes,
                                  static_cast<int64_t>(total_b));
#else
  H3RT_FAIL(
      "device_memory_limit auto reads the GPU's free memory, and this h3rt was built "
      "without CUDA: give a size (e.g. 24GB)");
#endif
}

std::string ModelSource::describe() const {
  if (!checkpoint.empty()) return checkpoint;
  return preset + " (synthetic, seed " + std::to_string(weights_seed) + ")";
}

std::unique_ptr<Denoiser> Denoiser::create(const ModelSource& s, const DenoiserOptions& given) {
  check_options(given);
  H3RT_CHECK(given.synthetic_gemm == SyntheticGemm::bf16 || s.checkpoint.empty(), "gemm ",
             synthetic_gemm_name(given.synthetic_gemm),
             " applies to the synthetic presets; checkpoint ", s.checkpoint,
             " runs each layer in the format it stores (quantize-checkpoint converts a file)");
#ifdef H3RT_HAVE_CUDA
  // Synthetic release-size weights are generated on the device, never held on the host.
  if (given.device == Device::cuda && s.checkpoint.empty()) {
    const DenoiserOptions o = resolve_auto_limit(given);
    H3RT_CHECK(s.qkv_override.empty(), "qkv_override needs a checkpoint");
    const std::optional<H3Config> config = config_preset(s.preset);
    H3RT_CHECK(config, "unknown preset '", s.preset, "' (tiny or h3)");
    const int group = synthetic_int8_group(*config, o.int8_group);
    const model::LoadMeter meter;
    std::optional<model::LoadPlan> lp =
        load_plan(*config, model::synthetic_block_storage(*config, o.synthetic_gemm),
                  model::synthetic_block_storage(*config, SyntheticGemm::bf16), o);
    // LoRAs merge on the GPU (these weights never exist on the host), each block before it is
    // quantized; under a limit the model cannot fit at all, each block then goes to its pinned
    // image before the next is made.
    std::optional<model::BlockwiseLoraMergeCuda> loras;
    if (!o.loras.empty()) loras.emplace(*config, read_loras(o), lora_options(o));
    const bool stream = lp && lp->stream;
    model::DeviceModel m = model::make_synthetic_gemm_model(
        *config, s.weights_seed, o.synthetic_gemm, group, stream ? &*lp : nullptr,
        loras ? &*loras : nullptr, model::load_stream_source(lp, o.weight_stream_source),
        block_progress(o));
    const WeightStreaming load =
        load_report(m, lp, o, meter, given.device_memory_limit == kDeviceMemoryAuto);
    LoraMergeReport lora = loras ? loras->report() : LoraMergeReport{};
    return std::make_unique<CudaDenoiser>(std::move(m), o, 0, std::move(lora), load);
  }
#endif
  return place(load_host_model(s, given.device), given);
}

std::unique_ptr<Denoiser> Denoiser::create(const std::map<std::string, Tensor>& tensors,
                                           const DenoiserOptions& given, QkvLayout qkv_layout) {
  check_options(given);
  if (given.device == Device::cpu)
    for (const auto& [key, t] : tensors)
      H3RT_CHECK(t.device() == Device::cpu, "tensor '", key,
                 "' is in device memory; a CPU model reads its weights from host memory");
  LoadOptions opts;
  opts.qkv_layout = qkv_layout;
  opts.dense_float_copies = given.device == Device::cpu;
  H3RT_CHECK(given.synthetic_gemm == SyntheticGemm::bf16, "gemm ",
             synthetic_gemm_name(given.synthetic_gemm),
             " applies to the synthetic presets; a state dict runs each layer in the format it "
             "holds");
  return place(load_model(tensors, opts), given);
}

}  // namespace h3rt
