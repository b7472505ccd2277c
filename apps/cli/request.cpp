#include "cli/request.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "h3rt/safetensors.h"
#include "h3rt/sampler.h"

namespace h3rt::cli {

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
        ->capture_default_str();
  cmd->add_option("--precision", precision,
                  "fp32 (bf16 weights upcast, fp32 math; CPU only) or bf16 (the reference's "
                  "bf16 storage and rounding points). Default: fp32 on cpu, bf16 on cuda")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--device", device,
                  "cpu (the exact reference) or cuda (bf16 kernels; needs a CUDA build and GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
}

std::string ModelOptions::precision_name() const {
  if (!precision.empty()) return precision;
  return device == "cuda" ? "bf16" : "fp32";
}

Precision ModelOptions::parsed_precision() const {
  return precision_name() == "bf16" ? Precision::bf16 : Precision::fp32;
}

namespace {

QkvLayout parse_qkv_layout(const std::string& s) {
  if (s == "fused") return QkvLayout::fused_thirds;
  if (s == "per-head") return QkvLayout::per_head_interleaved;
  return QkvLayout::autodetect;
}

double host_memory_bytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

}  // namespace

H3Model ModelOptions::load() const {
  H3RT_CHECK(preset.empty() || checkpoint.empty(),
             "give --preset or --checkpoint, not both (a checkpoint defines its own config)");
  LoadOptions opts;
  opts.qkv_layout = parse_qkv_layout(qkv_layout);
  if (!qkv_override.empty()) opts.overrides.push_back({qkv_override, opts.qkv_layout});
  if (!checkpoint.empty()) return load_model(checkpoint, opts);
  H3RT_CHECK(qkv_override.empty(), "--qkv-override needs --checkpoint");
  const std::string name = preset.empty() ? "tiny" : preset;
  H3Config config = *config_preset(name);
  WeightBytes need = estimate_weight_bytes(config);
  double have = host_memory_bytes();
  H3RT_CHECK(
      need.cpu_bytes < 0.8 * have, "the ", name, " preset has ", need.params / 1e9,
      "B parameters and needs ", need.cpu_bytes / 1e9,
      " GB of host memory on the CPU reference backend; this machine has ", have / 1e9,
      " GB. The CPU backend is the exact oracle for small configs; run large ones on a GPU.");
  return make_synthetic_model(config, weights_seed);
}

std::string ModelOptions::describe() const {
  if (!checkpoint.empty()) return checkpoint;
  return (preset.empty() ? std::string("tiny") : preset) + " (synthetic, seed " +
         std::to_string(weights_seed) + ")";
}

namespace {
constexpr int64_t kFramePattern[5] = {1, 4, 4, 4, 4};
}

int64_t video_frames_for(int64_t latent_frames) {
  int64_t frames = 0;
  for (int64_t f = 0; f < latent_frames; ++f) frames += kFramePattern[f % 5];
  return frames;
}

LatentShape latent_shape_for(int64_t width, int64_t height, int64_t frames, LatentShape cur) {
  H3RT_CHECK(width % 32 == 0 && height % 32 == 0 && width >= 0 && height >= 0,
             "--width and --height must be multiples of 32 (16x VAE compression and 2x2 patches), "
             "got ", width, "x", height);
  if (width) cur.width = width / 16;
  if (height) cur.height = height / 16;
  if (frames) {
    cur.frames = latent_frames_for(frames);
    cur.audio = audio_latents_for(frames / 24.0);
  }
  return cur;
}

int64_t latent_frames_for(int64_t video_frames) {
  H3RT_CHECK(video_frames >= 1, "--frames must be at least 1, got ", video_frames);
  int64_t t = 0, frames = 0;
  while (frames < video_frames) frames += kFramePattern[t++ % 5];
  if (frames == video_frames) return t;
  H3RT_FAIL("--frames ", video_frames, " is not a whole number of latent frames (each covers 1, ",
            "4, 4, 4, 4 video frames in turn); nearest valid counts: ", video_frames_for(t - 1),
            " and ", frames);
}

int64_t audio_latents_for(double seconds) {
  H3RT_CHECK(seconds > 0 && std::isfinite(seconds), "--audio-seconds must be positive, got ",
             seconds);
  // 1e-9 keeps decimal inputs such as 0.225 s (exactly 9 latents) from rounding up.
  return static_cast<int64_t>(std::ceil(seconds * 40.0 - 1e-9));
}

namespace {

Tensor text_tensor(const SafetensorsFile& f, const H3Config& config) {
  std::string name = f.contains("input/text_embeds") ? "input/text_embeds" : "text_embeds";
  Tensor t = f.get(name);
  H3RT_CHECK(t.dtype() == DType::bf16 || t.dtype() == DType::f32, f.path(), ": tensor '", name,
             "' is ", dtype_name(t.dtype()), ", expected bf16 or f32");
  bool ok = (t.dim() == 3 && t.size(0) == 1 && t.size(2) == config.text_dim) ||
            (t.dim() == 2 && t.size(1) == config.text_dim);
  H3RT_CHECK(ok, f.path(), ": tensor '", name, "' has shape ", shape_str(t.shape()),
             ", expected [1, L, ", config.text_dim, "] (text_dim of the model)");
  return t;
}

FloatVec to_floatvec(const Tensor& t) {
  std::vector<float> v = t.to_f32();
  return FloatVec(v.begin(), v.end());
}

}  // namespace

FloatVec text_embeddings_from_file(const std::string& path, const H3Config& config,
                                   int64_t* length) {
  SafetensorsFile f = SafetensorsFile::open(path);
  Tensor t = text_tensor(f, config);
  *length = t.size(-2);
  H3RT_CHECK(*length >= 1, path, ": text embeddings have no tokens");
  return to_floatvec(t);
}

Request request_from_inputs(const std::string& path, const H3Config& config) {
  SafetensorsFile f = SafetensorsFile::open(path);
  Tensor text = text_tensor(f, config);
  Tensor video = f.get("input/video_latents");
  H3RT_CHECK(video.dtype() == DType::f32 && video.dim() == 5 && video.size(0) == 1 &&
                 video.size(1) == config.in_channels && video.size(3) % 2 == 0 &&
                 video.size(4) % 2 == 0,
             path, ": tensor 'input/video_latents' is ", dtype_name(video.dtype()), " ",
             shape_str(video.shape()), ", expected f32 [1, ", config.in_channels,
             ", T, Hl, Wl] with even Hl and Wl");
  Tensor audio = f.get("input/audio_latents");
  H3RT_CHECK(audio.dtype() == DType::f32 && audio.dim() == 3 && audio.size(0) == 2 &&
                 audio.size(1) == config.audio_channels,
             path, ": tensor 'input/audio_latents' is ", dtype_name(audio.dtype()), " ",
             shape_str(audio.shape()), ", expected f32 [2, ", config.audio_channels, ", N]");
  Request r;
  const int64_t T = video.size(2), Hl = video.size(3), Wl = video.size(4), N = audio.size(2);
  r.layout = make_t2va_layout(text.size(-2), N, T, Hl, Wl);
  std::vector<float> v = video.to_f32(), a = audio.to_f32();
  r.video_rows = patchify_video(v.data(), config.in_channels, T, Hl, Wl);
  r.audio_rows = audio_latents_to_rows(a.data(), config.audio_channels, N);
  r.text = to_floatvec(text);
  return r;
}

}  // namespace h3rt::cli
