// Internal: the list of checkpoint keys a configuration needs, and the assembly of H3Weights
// from named tensors (a mapped file with overrides, or synthetic tensors) with full validation.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "h3rt/model.h"

namespace h3rt::model {

// One checkpoint tensor under its original / ComfyUI key, with the release's storage dtype.
struct WeightSpec {
  std::string key;
  Shape shape;
  DType dtype;  // f32 for the float32 islands, bf16 elsewhere
};
std::vector<WeightSpec> weight_specs(const H3Config& config);

// A key of the curve-form AdaLN (adaln_t_table and the adaln_proj.linear tensors) when the
// config has that form: float tensors (f32, bf16 or f16), never quantized.
bool is_adaln_curve_key(const H3Config& config, const std::string& key);

// "blocks.<i>.attn.to_gate_compress.*" (VSA builds, i < layers): accepted by the loader and
// ignored by the dense forward.
bool is_gate_compress_key(const H3Config& config, const std::string& key);

// A host copy of a caller's device tensor (a '.weight' of a state dict a CUDA model uses in
// place) for a use that reads it on the host, with one warning line naming it and `why`.
Tensor host_copy(const Tensor& t, const std::string& name, const char* why);

// A tensor offered to the assembly, and where it came from (named in error messages).
struct SourceTensor {
  Tensor tensor;
  std::string file;
  QkvLayout qkv_layout = QkvLayout::fused_thirds;  // resolved (never autodetect)
};
using TensorSource = std::map<std::string, SourceTensor>;

// Validates every key of `source` against the specs (missing, unexpected, mis-shaped,
// unsupported dtype or format: all reported in one h3rt::Error) and builds the weights,
// reordering per-head-interleaved qkv rows to [q; k; v].
// dense_float: fill LinearWeight::w of float layers at load (LoadOptions::dense_float_copies).
H3Weights assemble_weights(const H3Config& config, const TensorSource& source,
                           bool dense_float = true);

// The per-layer format hook: how the linear layer `layer` (key prefix) is stored in `source`.
// A "<layer>.comfy_quant" marker (u8 JSON bytes, {"format": "nvfp4"} or {"format":
// "float8_e4m3fn"}) decides; without a readable marker of a known format, an e4m3
// "<layer>.weight" is fp8_scaled and otherwise the weight's dtype (bf16, else f32) is used.
WeightFormat detect_linear_format(const TensorSource& source, const std::string& layer);

// The format as a user reads it: weight_format_name, with int8 layers named "int8_convrot G=<g>"
// or "int8" (plain tensorwise).
std::string linear_format_label(const TensorSource& source, const std::string& layer);

// Whether the layer's marker asks "full_precision_matrix_mult": true
// (LinearWeight::full_precision).
bool full_precision_layer(const TensorSource& source, const std::string& layer);

// Suffixes of the auxiliary tensors a quantized linear layer may carry besides ".weight".
const std::vector<std::string>& quantized_aux_suffixes();

// Adds (or replaces) every tensor of `file` with its resolved qkv layout. Layers the file's
// __metadata__ "_quantization_metadata" names (ComfyUI: {"layers": {"<layer>": {"format":
// ...}}}, or the bare layer mapping) get a "<layer>.comfy_quant" marker made from their entry,
// unless the file holds that marker as a tensor. Throws naming the file on unparsable metadata.
void add_source_file(TensorSource& source, const SafetensorsFile& file, QkvLayout asked);

}  // namespace h3rt::model
