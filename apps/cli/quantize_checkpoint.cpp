// `h3rt quantize-checkpoint`: write a ComfyUI-format quantized copy (nvfp4, fp8_scaled, int8) of a
// bf16/f32 H3 checkpoint: the chosen linears of every block and refiner block are quantized and
// marked with `<layer>.comfy_quant`; every other tensor and __metadata__ is copied unchanged.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "h3rt/quantize.h"

namespace h3rt::cli {

void add_quantize_checkpoint_command(CLI::App& app) {
  struct Opts {
    std::string in, out, format;
    int64_t group = 256, adaln_group = -1, io_group = -1;
    std::vector<std::string> layers = {"qkv", "out", "fc1", "fc2"}, keep;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "quantize-checkpoint",
      "Quantize the big linears (attn.qkv_proj, attn.out_proj, mlp.fc1, mlp.fc2) of an H3 "
      "checkpoint to NVFP4 (g_w = amax/2688, e4m3 block scales, 128x4 tiled), fp8_scaled "
      "(weight_scale = amax/448) or int8 W8A8 (int8_convrot: Hadamard-rotated per group, per-row "
      "scales; int8: the same without rotation), in ComfyUI's format with comfy_quant markers");
  cmd->add_option("--in", o->in, "input .safetensors (bf16/f32 linears)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", o->out, "output .safetensors")->required();
  cmd->add_option("--format", o->format, "target format")
      ->required()
      ->check(CLI::IsMember({"nvfp4", "fp8", "int8_convrot", "int8"}));
  cmd->add_option("--group-size", o->group,
                  "int8_convrot: the rotation's group size (a power of 4 dividing every chosen "
                  "layer's input features; the tiny preset needs 16 or 64)")
      ->capture_default_str();
  cmd->add_option("--adaln-group-size", o->adaln_group,
                  "int8_convrot: the AdaLN layers' group size when --layers has adaln (default: "
                  "--group-size; 0: plain int8 AdaLN)");
  cmd->add_option("--io-group-size", o->io_group,
                  "int8_convrot: the group size of the io layers when --layers has io (default: "
                  "--group-size; H3's video_patch_proj reads 96 features: 16 divides them all; "
                  "0: plain int8)");
  cmd->add_option("--layers", o->layers,
                  "which linears of each block (comma separated); adaln: every block's and the "
                  "final layer's adaln_proj.linear (full AdaLN form); io (int8 only): "
                  "video/audio_patch_proj, condition_proj and the output heads")
      ->delimiter(',')
      ->check(CLI::IsMember({"qkv", "out", "fc1", "fc2", "adaln", "io"}))
      ->capture_default_str();
  cmd->add_option("--keep-bf16", o->keep,
                  "layers left as stored: a layer (blocks.0.mlp.fc2) or a block prefix "
                  "(blocks.0, token_refiner.blocks.0); comma separated or repeated")
      ->delimiter(',');
  cmd->callback([o] {
    check_output_path(o->out, "--out");
    QuantizeCheckpointOptions q;
    q.format = o->format == "nvfp4" ? WeightFormat::nvfp4
               : o->format == "fp8" ? WeightFormat::fp8_scaled
                                    : WeightFormat::int8;
    q.int8_group = o->format == "int8" ? 0 : o->group;
    q.adaln_int8_group = o->format == "int8" ? 0 : o->adaln_group;
    q.io_int8_group = o->format == "int8" ? 0 : o->io_group;
    q.layers = o->layers;
    q.keep = o->keep;
    q.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    const QuantizeCheckpointReport r = quantize_checkpoint(o->in, o->out, q);
    std::fprintf(stderr,
                 "h3rt quantize-checkpoint: %d layers -> %s, %d kept; %.3f MB -> %.3f MB: %s\n",
                 r.quantized, o->format.c_str(), r.kept, r.in_bytes / 1e6, r.out_bytes / 1e6,
                 o->out.c_str());
  });
}

}  // namespace h3rt::cli
