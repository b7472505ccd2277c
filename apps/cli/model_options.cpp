#include "cli/model_options.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <system_error>

#include "cli/progress.h"
#include "cli/validators.h"
#include "h3rt/device.h"
#include "h3rt/selftest.h"

namespace h3rt::cli {
namespace {

QkvLayout parse_qkv_layout(const std::string& s) {
  if (s == "fused") return QkvLayout::fused_thirds;
  if (s == "per-head") return QkvLayout::per_head_interleaved;
  return QkvLayout::autodetect;
}

ModelSource source_of(const ModelOptions& o) {
  ModelSource s;
  s.checkpoint = o.checkpoint;
  if (!o.preset.empty()) s.preset = o.preset;
  s.weights_seed = o.weights_seed;
  s.qkv_layout = parse_qkv_layout(o.qkv_layout);
  s.qkv_override = o.qkv_override;
  return s;
}

}  // namespace

void add_device_memory_limit(CLI::App* cmd, std::string& size) {
  cmd->add_option("--device-memory-limit", size,
                  "CUDA: the device bytes for the weights and a step's activations together; 0 "
                  "(the default) is no limit. SIZE is bytes (2.5e10) or with a unit: GB/MB "
                  "(powers of 1000, 24GB = 24e9 bytes) or GiB/MiB (powers of 1024), or auto "
                  "(the GPU's free memory at load less max(1.5 GiB, 5% of the card)). When the "
                  "resident model and the request's activations exceed it, the weight "
                  "matrices of as many transformer blocks as it needs (spread over the model; "
                  "the rest stay resident) stay in host memory (--weight-stream-source) and "
                  "stream into two device slots, each block's copy overlapped with the compute "
                  "of the blocks before it (the same bits). When the resident model cannot fit "
                  "it at all, those blocks go to host memory as they load, never on the "
                  "device (the load's peak: weight_streaming.load_peak_device_bytes); below what "
                  "streaming needs, an error says how many bytes it needs")
      ->capture_default_str();
}

void add_weight_stream_source(CLI::App* cmd, std::string& source) {
  cmd->add_option("--weight-stream-source", source,
                  "With --device-memory-limit, where streamed blocks come from: pinned (a "
                  "page-locked host copy of every block: fastest, needs the streamed bytes in "
                  "free host memory), file (each block read from the memory-mapped checkpoint "
                  "as it is needed, through two pinned staging buffers: no copy of the model in "
                  "host memory, but a step may wait on the disk; a preset's blocks are held in "
                  "pageable host memory instead) or auto (pinned when every block's copy fits "
                  "the available host memory less 10% of the total and 2 GB, else file)")
      ->check(CLI::IsMember({"auto", "pinned", "file"}))
      ->capture_default_str();
}

void ModelOptions::add_to(CLI::App* cmd, bool with_preset) {
  if (with_preset)
    cmd->add_option("--preset", preset,
                    "Built-in model with synthetic weights: tiny (the default; runs in seconds) "
                    "or h3 (release dimensions, 33B parameters)")
        ->check(CLI::IsMember({"tiny", "h3"}));
  auto* ck = cmd->add_option("--checkpoint", checkpoint,
                             "H3 checkpoint (.safetensors, original/ComfyUI key names); the "
                             "config is inferred from its shapes")
                 ->check(CLI::ExistingFile);
  if (!with_preset) ck->required();
  cmd->add_option("--qkv-layout", qkv_layout,
                  "Row order of qkv_proj weights: auto (file metadata 'qkv_layout', else fused), "
                  "fused ([q;k;v], ComfyUI) or per-head (raw shards [q0 k0 v0 q1 ...])")
      ->check(CLI::IsMember({"auto", "fused", "per-head"}))
      ->capture_default_str();
  cmd->add_option("--qkv-override", qkv_override,
                  "A file of qkv_proj tensors loaded over the checkpoint's, in --qkv-layout order")
      ->check(CLI::ExistingFile);
  if (with_preset)
    cmd->add_option("--weights-seed", weights_seed, "Seed of a preset's synthetic weights")
        ->check(seed_number())
        ->capture_default_str();
  cmd->add_option("--precision", precision,
                  "fp32 (bf16 weights upcast, fp32 math; CPU only) or bf16 (the reference's "
                  "bf16 storage and rounding points). Default: fp32 on cpu, bf16 on cuda")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--device", device,
                  "cpu (the exact reference) or cuda (bf16 kernels; needs a CUDA build and GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--fp8-activations", fp8_activations,
                  "fp8_scaled block projections (qkv, out, fc1, fc2) without an input_scale: "
                  "static (the default, as ComfyUI: dequantized weights, unquantized "
                  "activations) or dynamic (activations quantized to e4m3 with the per-call "
                  "scale amax|x|/448, fp8 GEMMs on the GPU, the same rule on the CPU "
                  "reference). Layers with an input_scale always use it; other layers are "
                  "unaffected")
      ->check(CLI::IsMember({"static", "dynamic"}))
      ->capture_default_str();
  cmd->add_option("--lora", loras,
                  "LoRA file F[:strength] (default strength 1), repeatable, merged into the "
                  "weights once after loading in the order given: ComfyUI's key forms "
                  "(diffusion_model.<layer>, lora_unet_<layer>, lora_A/lora_B or "
                  "lora_down/lora_up, optional alpha: scale = strength * alpha / rank) into "
                  "bf16/f32 layers, int8_convrot and int8 layers (delta rotated into the "
                  "layer's basis, requantized with its rule), fp8_scaled and nvfp4 layers "
                  "(requantized) and pruned AdaLN layers where the shapes fit. A checkpoint "
                  "file merges on the host before upload; the synthetic presets on --device "
                  "cuda merge on the GPU (the same bits)")
      ->allow_extra_args(false);
  cmd->add_flag("--lora-skip-unmatched", lora_skip_unmatched,
                "Skip LoRA pairs whose layer is absent or whose shapes do not fit (e.g. a full "
                "AdaLN LoRA on a pruned checkpoint) with a warning, instead of failing");
  cmd->add_option("--check-finite", check_finite,
                  "NaN/Inf checks, an error naming the tensor, block and step: first (the "
                  "default: the inputs and every stage's output of the first step: packed "
                  "input, token refiner, each block, final norm, velocities), all (every step, "
                  "and a scan of every weight when the model is loaded) or off")
      ->check(CLI::IsMember({"off", "first", "all"}))
      ->capture_default_str();
  add_device_memory_limit(cmd, device_memory_limit);
  add_weight_stream_source(cmd, weight_stream_source);
}

std::string ModelOptions::precision_name() const {
  if (!precision.empty()) return precision;
  return device == "cuda" ? "bf16" : "fp32";
}

std::string ModelOptions::describe() const {
  std::string d = source_of(*this).describe();
  if (gemm == "int8" && checkpoint.empty()) {
    const int g =
        synthetic_int8_group(*config_preset(preset.empty() ? "tiny" : preset), int8_group);
    return d + ", int8 W8A8 block GEMMs (group " + std::to_string(g) + ")";
  }
  return gemm == "bf16" ? d : d + ", " + gemm + " block GEMMs";
}

ModelSource ModelOptions::source() const {
  return source_of(*this);
}

DenoiserOptions ModelOptions::denoiser_options() const {
  DenoiserOptions d;
  d.device = parse_device(device, "--device");
  d.precision = parse_precision(precision_name(), "--precision");
  d.attention = parse_attention(attention, "--attention");
  d.cuda_graphs = cuda_graph == "on";
  d.fp8_activations = parse_fp8_activations(fp8_activations, "--fp8-activations");
  for (const auto& l : loras) {
    d.loras.push_back(parse_lora_spec(l));
    std::error_code ec;
    H3RT_CHECK(std::filesystem::is_regular_file(d.loras.back().path, ec), "--lora ", l, ": ",
               d.loras.back().path, " is not a file");
  }
  d.lora_skip_unmatched = lora_skip_unmatched;
  d.check_finite = parse_check_finite(check_finite, "--check-finite");
  d.device_memory_limit = parse_memory_size(device_memory_limit, "--device-memory-limit");
  d.weight_stream_source =
      parse_weight_stream_source(weight_stream_source, "--weight-stream-source");
  d.synthetic_gemm = parse_synthetic_gemm(gemm, "--gemm");
  d.int8_group = int8_group;
  return d;
}

std::unique_ptr<Denoiser> ModelOptions::create() const {
  H3RT_CHECK(attention != "sage" || device == "cuda",
             "--attention sage runs on the GPU only (--device cuda); the CPU runs the reference "
             "attention");
  H3RT_CHECK(preset.empty() || checkpoint.empty(),
             "give --preset or --checkpoint, not both (a checkpoint defines its own config)");
  H3RT_CHECK(!checkpoint.empty() || qkv_override.empty(), "--qkv-override needs --checkpoint");
  H3RT_CHECK(gemm == "bf16" || checkpoint.empty(), "--gemm ", gemm,
             " quantizes a preset's synthetic weights (--preset); --checkpoint ", checkpoint,
             " runs each layer in the format the file stores (h3rt quantize-checkpoint converts "
             "one)");
  H3RT_CHECK(gemm == "bf16" || device == "cuda", "--gemm ", gemm,
             " runs on the GPU only (--device cuda); the CPU reference runs bf16/fp32 weights");
  DenoiserOptions d = denoiser_options();
  std::optional<Progress> progress;  // the blocks' upload: tens of seconds from a large file
  d.load_progress = [&](int done, int total) {
    if (!progress) progress.emplace("loading blocks", total, "block");
    progress->update(done);
  };
  std::unique_ptr<Denoiser> m = Denoiser::create(source_of(*this), d);
  if (device == "cuda") {
    const std::string note = untested_arch_note(cuda_device_cc(cuda_current_device()));
    if (!note.empty()) std::fprintf(stderr, "h3rt: note: %s\n", note.c_str());
  }
  for (const auto& w : m->lora_report().warnings) std::fprintf(stderr, "h3rt: %s\n", w.c_str());
  if (!loras.empty())
    std::fprintf(stderr, "h3rt: LoRA: %d pair(s) merged into %d layer(s)\n", m->lora_report().pairs,
                 m->lora_report().layers);
  if (d.fp8_activations == Fp8Activations::dynamic && m->fp8_dynamic_layers() == 0)
    std::fprintf(stderr, "h3rt: --fp8-activations dynamic: %s; nothing changes\n",
                 checkpoint.empty() ? "synthetic weights are bf16"
                                    : "the model has no fp8_scaled block projection without "
                                      "input_scale");
  return m;
}

}  // namespace h3rt::cli
