// LoRA files in ComfyUI's key forms, and their merge into a loaded H3 model's linear layers.
//
// Keys (comfy/lora.py, comfy/weight_adapter/lora.py): a module name followed by an adapter
// suffix. Module names: "diffusion_model.<layer>", "lora_unet_<layer with '.' as '_'>" or the
// bare "<layer>" (ComfyUI's MiniMaxH3 map), where <layer> is an original/ComfyUI key prefix
// such as "blocks.3.attn.qkv_proj". Suffixes: ".lora_up.weight" / ".lora_down.weight",
// ".lora_B.weight" / ".lora_A.weight", ".lora_B" / ".lora_A", ".lora.up.weight" /
// ".lora.down.weight", ".lora_B.default.weight" / ".lora_A.default.weight", and an optional
// scalar ".alpha". up = B [out, rank], down = A [rank, in] (f32, bf16 or f16).
//
// Merge arithmetic (fixed, documented order; CPU and GPU give the same bits):
//   scale = float(strength * (alpha / rank)) in double, rounded once (strength alone when the
//     pair has no alpha), as ComfyUI combines them;
//   D[o][i] = the f32 FMA chain over r = 0..rank-1 ascending: acc = fma(B[o][r], A'[r][i], acc)
//     from acc = 0, where A' = A, or for int8_convrot layers A rotated per group of G columns
//     exactly as the layer's activations are (hadamard_rotate_rows: (B A) H = B (A H), so the
//     delta lands in the stored weight's rotated basis);
//   W[o][i] = W[o][i] + scale * D[o][i] (two rounded f32 operations, never contracted), with W
//     the layer's working values: the float values of bf16/f32/f16 layers, q * s (the stored
//     rotated basis) for int8 layers, the dequantized values for fp8_scaled and nvfp4 layers;
//     several pairs on one layer add in the order of the LoRA list;
//   then the layer is stored again in its own format: bf16/f16 rounded (nearest even), f32 as
//     is; int8 requantized with its rule (int8_quantize_rows with no further rotation: bf16(W),
//     per-row s = amax/127, or one scale over the tensor when the layer had a scalar scale);
//     fp8_scaled and nvfp4 requantized as quantize-checkpoint does (scales recomputed, as
//     ComfyUI's requantize_from_float(scale="recalculate") does, without its stochastic rounding).
// Curve-form (pruned) AdaLN layers take a LoRA whose shapes fit them ([18H, k]); a LoRA made
// for the full AdaLN ([*, time_embed_dim]) or the time embedder does not fit a pruned
// checkpoint. Unknown targets and shapes that do not fit are errors naming the file and keys,
// or skipped with a warning under LoraOptions::skip_unmatched, and so are keys of adapter kinds
// h3rt does not merge (DoRA, LoHa, LoKr, diff patches); malformed files (a rank mismatch, half
// a pair, a non-scalar alpha, a key of no known form) are always errors.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "h3rt/model.h"
#include "h3rt/safetensors.h"

namespace h3rt {

// A LoRA to apply: a file and its strength, or tensors in memory under the file's keys (e.g.
// the adapters ComfyUI holds as weight patches); `path` then only names them in messages.
struct LoraSpec {
  std::string path;
  double strength = 1.0;
  // Host tensors, contiguous, read as a file's; they must outlive the load that merges them.
  std::shared_ptr<const std::map<std::string, Tensor>> tensors = nullptr;
};
// "F" or "F:strength" (the strength after the last ':' when it parses as a number).
LoraSpec parse_lora_spec(const std::string& arg);

// One low-rank pair as the file holds it.
struct LoraPair {
  std::string module;            // the file's module name, e.g. "diffusion_model.blocks.0.mlp.fc1"
  std::string target;            // the H3 layer it names ("blocks.0.mlp.fc1"); empty: none
  std::string up_key, down_key;  // file keys of B and A
  std::string alpha_key;         // empty when the pair has no alpha
  Tensor up, down;               // B [out, rank], A [rank, in]: views into the file
  double alpha = 0;              // when alpha_key is set
  int64_t rank() const { return down.size(0); }
  float scale(double strength) const;  // see the header comment
};

struct Lora {
  std::string path;
  double strength = 1.0;
  std::vector<LoraPair> pairs;  // in the file's key order (as h3rt reads it: sorted)
  // Keys of adapter kinds h3rt does not merge (DoRA, LoHa, LoKr, diff/diff_b, ...), one line
  // each: like a pair that does not fit, an error at merge time unless skip_unmatched.
  std::vector<std::string> unsupported;
  std::shared_ptr<const void> keep;  // the file or tensor map the views point into
};

// Reads and validates a LoRA file or a spec's tensors (key forms, pairs, ranks, alpha, dtypes);
// one Error lists every problem, naming the file and keys.
Lora read_lora(const LoraSpec& spec);
// The same on a file already open (spec.path names it in messages; the fuzz target's entry).
Lora read_lora(std::shared_ptr<const SafetensorsFile> file, const LoraSpec& spec);
// A synthetic LoRA for a config (`h3rt make-lora`, `h3rt bench lora-merge`, tests), in the shape
// of the release's turbo LoRA: pairs over, in this order, every block's qkv, out, fc1, fc2 and
// AdaLN, the refiner blocks' four projections, condition_proj and the final AdaLN, the first
// `pairs` of them (259 for the h3 config: 50 x 5 + 2 x 4 + 1) or all when fewer. B [out, rank]
// and A [rank, in] are hashed bf16 values in [-1, 1) / sqrt(columns) from `seed`, alpha = rank,
// module names diffusion_model.<layer> with lora_B/lora_A keys; path "<synthetic>".
Lora make_synthetic_lora(const H3Config& config, int64_t rank, int pairs = 259, uint64_t seed = 0);
// Writes a LoRA's pairs as a safetensors file under their keys (up_key, down_key, and an f32
// scalar at alpha_key when set), readable by read_lora.
void write_lora(const std::string& path, const Lora& lora);

// True when the file holds at least one LoRA up/down key (for `h3rt info`).
bool is_lora_file(const SafetensorsFile& file);

// The H3 linear layer a module path names ("blocks.3.attn.qkv_proj", also in the underscore
// form "blocks_3_attn_qkv_proj"), or empty. Does not check the index against a config.
std::string h3_linear_layer(const std::string& path);

// Targets grouped for display: "blocks.*.attn.qkv_proj" with the block indices it covers.
struct LoraTargetGroup {
  std::string pattern;           // the layer name with its block index as '*'
  std::vector<int64_t> blocks;   // indices covered (empty for top-level layers)
  std::map<int64_t, int> ranks;  // rank -> pairs
  std::map<double, int> alphas;  // alpha -> pairs (pairs without alpha not counted)
};
std::vector<LoraTargetGroup> lora_target_groups(const Lora& lora);

struct LoraOptions {
  bool skip_unmatched = false;  // skip (with a warning) pairs whose target is absent or misfits
};

struct LoraMergeReport {
  int pairs = 0;                      // pairs merged
  int layers = 0;                     // layers changed
  std::vector<std::string> warnings;  // one per skipped pair
};

// What merge_loras changed: the original state of each touched layer, by name (moved out of the
// model, not copied), to restore it bit for bit.
struct LoraMerge {
  std::vector<LinearWeight> saved;
  LoraMergeReport report;
};

// Checks every pair against the model (one Error listing all misfits unless skip_unmatched),
// then merges. The model's layers keep working for both backends: `data`/`scale` hold the new
// stored tensors (owned), `w`/`b` the values the CPU reference computes with.
LoraMerge merge_loras(H3Model& model, const std::vector<Lora>& loras,
                      const LoraOptions& options = {});
// Restores every layer merge_loras changed (the model must be the one it merged into).
void unmerge_loras(H3Model& model, LoraMerge& merge);

// The model's linear layers by name (the original key prefixes), for lookups.
std::map<std::string, LinearWeight*> linear_layers(H3Weights& weights);

}  // namespace h3rt
