// `h3rt info F`: what a safetensors file holds: tensors, dtypes, metadata, and for H3
// checkpoints the detected layout/format and inferred config.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "cli/commands.h"
#include "h3rt/device.h"
#include "h3rt/lora.h"
#include "h3rt/model.h"
#include "h3rt/pipeline.h"
#include "h3rt/safetensors.h"
#include "h3rt/selftest.h"
#include "model/weight_stream_plan.h"
#include "model/weights.h"
#ifdef H3RT_HAVE_CUDA
#include "cuda/runtime.h"
#include "ops/int8_linear/int8_linear.h"
#endif

namespace h3rt::cli {
namespace {

void print_tensors(const SafetensorsFile& f) {
  std::map<std::string, int64_t> bytes_by_dtype;
  for (const auto& e : f.entries()) {
    std::printf("  %-64s %-7s %s\n", e.name.c_str(), dtype_name(e.dtype),
                shape_str(e.shape).c_str());
    bytes_by_dtype[dtype_name(e.dtype)] += e.end - e.begin;
  }
  std::printf("%zu tensors;", f.entries().size());
  for (const auto& [d, b] : bytes_by_dtype) std::printf(" %s %.3f MB;", d.c_str(), b / 1e6);
  std::printf("\n");
}

// The H3 variant: AdaLN form, output heads, VSA gate projections.
void print_h3_variant(const SafetensorsFile& f, const H3Config& c) {
  if (c.adaln_curve())
    std::printf("AdaLN: pruned curve form (adaln_t_table grid %lld, rank %lld; no time embedder)\n",
                (long long)c.adaln_curve_grid, (long long)c.adaln_curve_rank);
  else
    std::printf("AdaLN: full (time embedder %lld -> %lld -> %lld, silu, AdaLN linears [*, %lld])\n",
                (long long)c.freq_dim, (long long)c.time_embed_hidden, (long long)c.time_embed_dim,
                (long long)c.time_embed_dim);
  if (c.pdd_heads > 1)
    std::printf("output heads: PDD head bank, n = %lld (needs the sampler's sigma schedule)\n",
                (long long)c.pdd_heads);
  else
    std::printf("output heads: plain\n");
  std::set<std::string> blocks;
  for (const auto& e : f.entries())
    if (model::is_gate_compress_key(c, e.name))
      blocks.insert(e.name.substr(0, e.name.find(".attn")));
  if (!blocks.empty())
    std::printf(
        "attn.to_gate_compress: present in %zu blocks (VSA; ignored by the dense forward)\n",
        blocks.size());
}

// The group a linear layer belongs to, for the per-group lines (the formats of ComfyUI's repacks
// differ by group: e.g. int8_convrot block projections beside f16 curve-form AdaLN layers).
std::string layer_group(const std::string& layer) {
  auto has = [&](const char* s) { return layer.find(s) != std::string::npos; };
  const bool refiner = layer.rfind("token_refiner.", 0) == 0;
  if (has(".attn.") || has(".mlp."))
    return refiner ? "refiner projections" : "block projections (qkv, out, fc1, fc2)";
  if (has("adaln_proj")) return layer.rfind("blocks.", 0) == 0 ? "block AdaLN" : "final AdaLN";
  if (layer.rfind("time_embedder.", 0) == 0) return "time embedder";
  return "input and output layers (patch projections, condition_proj, heads)";
}

// How a layer of `label`'s format runs, on the CUDA backend and on the CPU reference
// (`w8a8`: an int8 layer both backends run as W8A8: every one but the time embedder's, which
// computes on the host from dense values in both; `full`: its marker asks
// full_precision_matrix_mult).
std::string runs_with(const std::string& label, bool projection, bool w8a8, bool input_scale,
                      bool full) {
  if (full && label == "fp8_scaled")
    return "CUDA: dequantized to bf16 (full_precision_matrix_mult, as ComfyUI computes it)";
  if (full)
    return runs_with(label, projection, w8a8, input_scale, false) +
           " (its full_precision_matrix_mult is not followed: quantized)";
  if (label.rfind("int8", 0) == 0)
    return w8a8 ? "CUDA: int8 W8A8 GEMM (activation rotated and quantized per call); CPU: "
                  "exact W8A8 reference"
                : "CUDA and CPU: dequantized to float32 (the time embedder runs on the host)";
  if (label == "nvfp4")
    return projection ? "CUDA: NVFP4 W4A4 (Hopper: exact dequantize + cuBLASLt bf16; Blackwell: "
                        "block-scaled cuBLASLt, never run here); CPU: W4A4 reference"
                      : "CUDA: refused (nvfp4 runs in the block projections only)";
  if (label == "fp8_scaled")
    return projection && input_scale ? "CUDA: fp8 e4m3 GEMM with the static input_scale"
                                     : "CUDA: dequantized to bf16 (as ComfyUI computes it)";
  return label == "f32" ? "float32" : "bf16 GEMM (cuBLASLt on CUDA)";
}

void print_layer_groups(const H3Config& c, const model::TensorSource& src) {
  std::map<std::string, std::map<std::string, int>> groups;  // group -> format label -> count
  std::map<std::string, std::string> how;                    // "group|label" -> runs_with
  for (const auto& spec : model::weight_specs(c)) {
    if (spec.shape.size() != 2 || !spec.key.ends_with(".weight") || !src.count(spec.key)) continue;
    const std::string layer = spec.key.substr(0, spec.key.size() - 7), group = layer_group(layer);
    const std::string label = model::linear_format_label(src, layer);
    ++groups[group][label];
    const bool projection =
        spec.key.find(".attn.") != std::string::npos || spec.key.find(".mlp.") != std::string::npos;
    const bool host = layer.rfind("time_embedder.", 0) == 0;
    how[group + "|" + label] =
        runs_with(label, projection, !host, src.count(layer + ".input_scale") > 0,
                  model::full_precision_layer(src, layer));
  }
  std::printf("layer groups:\n");
  for (const auto& [group, labels] : groups)
    for (const auto& [label, n] : labels)
      std::printf("  %s: %s x%d -> %s\n", group.c_str(), label.c_str(), n,
                  how[group + "|" + label].c_str());
}

// How the CUDA model stores the first block's projections (model_cuda.cu's upload rule).
model::BlockStorage cuda_storage(const H3Config& c, const model::TensorSource& src) {
  const std::string label = model::linear_format_label(src, "blocks.0.attn.qkv_proj");
  model::LinearStorage s = model::LinearStorage::bf16;
  if (label.rfind("int8", 0) == 0) s = model::LinearStorage::int8;
  if (label == "nvfp4") s = model::LinearStorage::nvfp4;
  if (label == "fp8_scaled" && src.count("blocks.0.attn.qkv_proj.input_scale") &&
      !model::full_precision_layer(src, "blocks.0.attn.qkv_proj"))
    s = model::LinearStorage::fp8;
  model::BlockStorage st = model::uniform_storage(c, s);
  if (!c.adaln_curve() &&
      model::linear_format_label(src, "blocks.0.adaln_proj.linear").rfind("int8", 0) == 0)
    st.adaln = model::LinearStorage::int8;  // kept int8 (W8A8), as the upload does
  return st;
}

// Which source --weight-stream-source auto takes on this host for plan p.
void print_stream_source(const model::WeightStreamPlan& p) {
  const model::HostMemory h = model::host_memory();
  const WeightStreamSource s =
      model::choose_stream_source(WeightStreamSource::automatic, p.host_bytes, h);
  std::printf(
      "this host: %.2f GB of %.2f GB available: --weight-stream-source auto takes %s here "
      "(file: the blocks read from the mapped file at each step, %.2f GB pinned for staging)\n",
      h.available / 1e9, h.total / 1e9, weight_stream_source_name(s),
      model::with_source(p, WeightStreamSource::file).host_bytes / 1e9);
}

// What loading under `limit` puts on the device (model/weight_stream_plan.h, plan_load).
void print_load_plan(const H3Config& c, const model::BlockStorage& st, int64_t limit) {
  try {
    const model::LoadPlan load = model::plan_load(c, st, st, limit, true);
    if (load.stream)
      std::printf(
          "load: %zu blocks go from the file to host memory (pinned copies, or views of the "
          "file with --weight-stream-source file) as they are read; the load puts %.2f GB of "
          "weights on the device, never the whole model\n",
          load.plan.blocks.size(), load.device_weight_bytes / 1e9);
    else
      std::printf(
          "load: resident (%.2f GB of weights, within the limit); a request over the limit moves "
          "the blocks to host memory at its first forward\n",
          load.device_weight_bytes / 1e9);
  } catch (const Error& e) {
    std::printf("load: too small: %s\n", e.what());
  }
}

// Device bytes on CUDA at ComfyUI's default shape (864x480, 124 frames, 100 text tokens, Sage
// attention), and under --device-memory-limit whether the block weights would stream.
void print_device_plan(const H3Config& c, const model::TensorSource& src, int64_t limit) {
  const model::BlockStorage st = cuda_storage(c, src);
  const LatentShape sh = latent_shape_for(864, 480, 124, {0, 0, 0, 0});
  const SequenceLayout L = make_t2va_layout(100, sh.audio, sh.frames, sh.height, sh.width);
  model::WeightStreamInput in;
  in.limit = limit;
  in.weight_bytes = model::model_weight_bytes(c, st);
  in.slot_bytes = model::block_slot_layout(c, st).bytes;
  in.blocks = c.layers;
  in.working_set_bytes = model::estimate_working_set_bytes(c, st, true, model::forward_shape(L));
  std::printf(
      "CUDA: %.2f GB of weights (estimate, as uploaded); a step at 864x480, 124 frames "
      "needs ~%.2f GB more (Sage attention)\n",
      in.weight_bytes / 1e9, in.working_set_bytes / 1e9);
  if (limit == 0) return;
  try {
    const model::WeightStreamPlan p = model::plan_weight_streaming(in);
    if (p.stream) {
      const std::string which =
          static_cast<int64_t>(p.blocks.size()) == in.blocks
              ? "the weights of all " + std::to_string(in.blocks) + " blocks stream"
              : "the weights of " + std::to_string(p.blocks.size()) + " of the " +
                    std::to_string(in.blocks) + " blocks stream, the rest stay resident";
      std::printf(
          "--device-memory-limit %.2f GB: %s (%.2f GB pinned host memory, %d slots of %.3f GB, "
          "%.2f GB H2D per step, %.2f GB on the device)\n",
          limit / 1e9, which.c_str(), p.host_bytes / 1e9, p.slots, p.slot_bytes / 1e9,
          p.h2d_bytes_per_step / 1e9, p.device_bytes / 1e9);
      print_stream_source(p);
    } else {
      std::printf("--device-memory-limit %.2f GB: the weights stay resident (%.2f GB)\n",
                  limit / 1e9, p.device_bytes / 1e9);
    }
  } catch (const Error& e) {
    std::printf("--device-memory-limit %.2f GB: too small: %s\n", limit / 1e9, e.what());
  }
  print_load_plan(c, st, limit);
}

// For files with H3 keys: the inferred config, the qkv row order and each linear layer's format.
void print_h3(const SafetensorsFile& f, int64_t limit) {
  if (!f.contains("blocks.0.attn.qkv_proj.weight")) {
    std::printf("not an H3 checkpoint (no blocks.0.attn.qkv_proj.weight)\n");
    return;
  }
  H3Config c = infer_config(f);
  std::printf(
      "H3 checkpoint: hidden %lld, %lld blocks, %lld heads x %lld, ffn %lld, %lld refiner "
      "blocks, text_dim %lld\n",
      (long long)c.hidden, (long long)c.layers, (long long)c.heads, (long long)c.head_dim,
      (long long)c.ffn, (long long)c.refiner_layers, (long long)c.text_dim);
  print_h3_variant(f, c);
  auto it = f.metadata().find("qkv_layout");
  std::printf("qkv_proj rows: %s\n", it == f.metadata().end()
                                         ? "fused [q; k; v] (no qkv_layout metadata)"
                                         : ("metadata qkv_layout = " + it->second).c_str());
  model::TensorSource src;
  model::add_source_file(src, f, QkvLayout::autodetect);  // also reads _quantization_metadata
  std::map<std::string, int> formats;
  for (const auto& spec : model::weight_specs(c)) {
    const std::string suffix = ".weight";
    if (spec.shape.size() != 2 || spec.key.size() <= suffix.size() ||
        spec.key.compare(spec.key.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    std::string layer = spec.key.substr(0, spec.key.size() - suffix.size());
    if (src.count(spec.key)) ++formats[model::linear_format_label(src, layer)];
  }
  std::printf("linear layers by format:");
  for (const auto& [name, n] : formats) std::printf(" %s %d;", name.c_str(), n);
  std::printf("\n");
  print_layer_groups(c, src);
  WeightBytes b = estimate_weight_bytes(c);
  std::printf("%.3fB parameters\n", b.params / 1e9);
  print_device_plan(c, src, limit);
#ifdef H3RT_HAVE_CUDA
  const std::string no_gpu = cuda::cuda_device_unavailable_reason();
  const bool gpu = no_gpu.empty();
  std::printf("this machine: %s\n", gpu ? "a CUDA device is present (--device cuda runs the CUDA "
                                          "paths above; --device cpu the CPU reference)"
                                        : (no_gpu + ": the CPU reference runs it").c_str());
  const bool int8 = std::any_of(formats.begin(), formats.end(),
                                [](const auto& f) { return f.first.rfind("int8", 0) == 0; });
  const int cc = gpu ? cuda::current_device_cc() : 0;
  if (gpu) {
    const std::string arch = cuda::arch_support_error(cc, cuda::device_name(cuda_current_device()));
    const std::string note = untested_arch_note(cc);
    if (!arch.empty()) std::printf("this GPU: %s\n", arch.c_str());
    if (arch.empty() && !note.empty()) std::printf("this GPU: %s\n", note.c_str());
  }
  if (gpu && int8)
    std::printf("int8 GEMMs on this GPU (compute capability %d.%d): %s\n", cc / 10, cc % 10,
                ops::int8_gemm_default_description().c_str());
#else
  std::printf("this machine: h3rt built without CUDA: the CPU reference runs it\n");
#endif
}

// Block indices as ranges: "0-49" or "0-3, 7".
std::string index_ranges(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(v[i]) +
           (j > i ? "-" + std::to_string(v[j]) : std::string());
    i = j + 1;
  }
  return out;
}

template <typename K>
std::string counts(const std::map<K, int>& m) {
  std::string out;
  for (const auto& [k, n] : m) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%g (x%d)", out.empty() ? "" : ", ", double(k), n);
    out += buf;
  }
  return out.empty() ? "none" : out;
}

// For LoRA files: pairs, ranks, alphas and the targeted layers by group.
void print_lora(const std::string& path) {
  const Lora lora = read_lora({path, 1.0});
  std::map<int64_t, int> ranks;
  std::map<double, int> alphas;
  for (const auto& p : lora.pairs) {
    ++ranks[p.rank()];
    if (!p.alpha_key.empty()) ++alphas[p.alpha];
  }
  std::printf("LoRA: %zu pairs; rank %s; alpha %s\n", lora.pairs.size(), counts(ranks).c_str(),
              counts(alphas).c_str());
  std::printf(
      "targeted layers by group (scale = strength * alpha / rank; strength 1 without "
      "alpha):\n");
  for (const auto& g : lora_target_groups(lora)) {
    std::printf("  %s: %zu layer(s)", g.pattern.c_str(), g.blocks.empty() ? 1 : g.blocks.size());
    if (!g.blocks.empty()) std::printf(" (blocks %s)", index_ranges(g.blocks).c_str());
    std::printf("; rank %s; alpha %s\n", counts(g.ranks).c_str(), counts(g.alphas).c_str());
  }
  for (const auto& u : lora.unsupported) std::printf("  not merged: %s\n", u.c_str());
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info",
                                 "List a safetensors file's tensors, metadata, detected "
                                 "checkpoint format and inferred H3 config; for a LoRA file "
                                 "its pairs, ranks, alphas and targeted layers by group");
  auto path = std::make_shared<std::string>();
  auto limit = std::make_shared<std::string>("0");
  cmd->add_option("file", *path, "a .safetensors file")->required();
  cmd->add_option("--device-memory-limit", *limit,
                  "H3 checkpoints: also say whether under this limit (as `sample "
                  "--device-memory-limit`: 24GB, 24GiB, bytes, or auto on this GPU) the block "
                  "weights would stream "
                  "at 864x480, 124 frames, the device bytes planned, and what the load puts "
                  "on the device")
      ->capture_default_str();
  cmd->callback([path, limit] {
    const int64_t bytes =
        resolve_device_memory_limit(parse_memory_size(*limit, "--device-memory-limit"));
    SafetensorsFile f = SafetensorsFile::open(*path);
    std::printf("%s\n", path->c_str());
    for (const auto& [k, v] : f.metadata())
      std::printf("  metadata %s = %s\n", k.c_str(), v.c_str());
    print_tensors(f);
    if (is_lora_file(f))
      print_lora(*path);
    else
      print_h3(f, bytes);
  });
}

}  // namespace h3rt::cli
