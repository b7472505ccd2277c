// Quantized checkpoints in ComfyUI's conventions (see WeightFormat in h3rt/model.h): the
// per-layer quantizers, the `<layer>.comfy_quant` marker, and the whole-file transform behind
// `h3rt quantize-checkpoint`.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "h3rt/model.h"
#include "h3rt/safetensors.h"

namespace h3rt {

// The "format" names ComfyUI's comfy_quant markers use for the formats we load. int8 markers
// also carry "convrot" (bool) and "convrot_groupsize" (default 256), possibly under "params".
inline constexpr const char* kComfyNvfp4 = "nvfp4";
inline constexpr const char* kComfyFp8 = "float8_e4m3fn";
inline constexpr const char* kComfyInt8 = "int8_tensorwise";

// A u8 [n] tensor holding the JSON bytes {"format":"<format>"}.
Tensor comfy_quant_marker(const std::string& format);

// NVFP4 weight packing (the packer's weight path): g_w = float32(amax|W|) / 2688 in fp32
// (Nvfp4ScaleRule::kF32Divide), then block scales and codes as nvfp4_quantize. Returns
// "<layer>.weight" (u8 [N, K/2]), "<layer>.weight_scale" (e4m3 [roundup(N,128),
// roundup(K/16,4)]), "<layer>.weight_scale_2" (f32 []) and "<layer>.comfy_quant".
// w: 2-D bf16 or f32 host tensor [N, K], K % 16 == 0.
NamedTensors quantize_linear_nvfp4(const std::string& layer, const Tensor& w);

// fp8_scaled: s = float32(amax|W|) / 448 (1 for an all-zero W, which any scale represents),
// q = e4m3_satfinite(W / s). Returns "<layer>.weight" (e4m3 [N, K]), "<layer>.weight_scale"
// (f32 []) and "<layer>.comfy_quant". w: 2-D bf16 or f32 host tensor.
NamedTensors quantize_linear_fp8(const std::string& layer, const Tensor& w);

// int8_tensorwise, W8A8 (h3rt/int8.h): with group > 0 (convrot) the weight is rotated per group
// of `group` input columns first; q and the per-row scale by int8_quantize_rows. Returns
// "<layer>.weight" (i8 [N, K]), "<layer>.weight_scale" (f32 [N, 1]) and "<layer>.comfy_quant"
// ({"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": G} with convrot).
NamedTensors quantize_linear_int8(const std::string& layer, const Tensor& w, int64_t group);

struct QuantizeCheckpointOptions {
  WeightFormat format = WeightFormat::nvfp4;  // nvfp4, fp8_scaled or int8
  int64_t int8_group = 256;                   // int8: convrot group size, 0 = plain tensorwise
  // int8: the AdaLN layers' group size (their input is the time embedding's width, e.g. 2688,
  // which 256 does not divide); -1: int8_group.
  int64_t adaln_int8_group = -1;
  // int8: the group size of the "io" layers (their inputs are 96, audio_channels, text_dim and
  // hidden wide: 16 divides all of H3's); -1: int8_group.
  int64_t io_int8_group = -1;
  // Which linears of every block and refiner block: "qkv" (attn.qkv_proj), "out"
  // (attn.out_proj), "fc1" (mlp.fc1), "fc2" (mlp.fc2); "adaln": every transformer block's
  // adaln_proj.linear and final_layer.adaln_proj.linear (the layers an unpruned int8 release
  // file also stores int8; full AdaLN form only); "io" (int8 only): the layers around the
  // blocks, video_patch_proj, audio_patch_proj, condition_proj and, without a PDD bank,
  // final_layer.video_out / audio_out (no published file quantizes them; both backends run
  // such layers as W8A8).
  std::vector<std::string> layers = {"qkv", "out", "fc1", "fc2"};
  // Left as stored: a layer ("blocks.0.mlp.fc2") or every chosen layer under a prefix
  // ("blocks.0", "token_refiner.blocks.0"). An entry that matches no chosen layer is an error.
  std::vector<std::string> keep;
  // Called once per layer, before it is quantized or kept, with a one-line description.
  std::function<void(const std::string&)> progress;
};

struct QuantizeCheckpointReport {
  int quantized = 0;                    // layers written in the target format
  int kept = 0;                         // chosen layers left as stored (keep)
  int64_t in_bytes = 0, out_bytes = 0;  // tensor data bytes of the two files
};

// Reads the H3 checkpoint `in_path` (bf16/f32 linears; config inferred from shapes), quantizes
// the chosen layers and writes `out_path` with comfy_quant markers; every other tensor is copied
// unchanged and `__metadata__` is preserved. Throws naming the file and layer on a layer that is
// absent, already quantized, or not quantizable (nvfp4 needs in % 16 == 0).
QuantizeCheckpointReport quantize_checkpoint(const std::string& in_path,
                                             const std::string& out_path,
                                             const QuantizeCheckpointOptions& options);

}  // namespace h3rt
