#include <cuda_bf16.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/host_device.h"
#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "formats/nvfp4_quantize.h"
#include "h3rt/int8.h"
#include "h3rt/nvfp4.h"
#include "io/mapped_files.h"
#include "model/model_cuda.h"
#include "model/weight_stream_cuda.h"
#include "model/weights.h"
#include "ops/int8_linear/int8_linear.h"
#include "ops/rope_table/rope_table.h"

namespace h3rt::model {
namespace {

// ---- upload ------------------------------------------------------------------------------

Tensor upload_values(const FloatVec& v, Shape shape, DType dtype) {
  return cuda::to_device(
      tensor_from_f32(std::vector<float>(v.begin(), v.end()), std::move(shape), dtype));
}

Tensor device_scalar(const Tensor& host_scalar, const std::string& what) {
  H3RT_CHECK(host_scalar.numel() == 1, what, " must hold one value, has shape ",
             shape_str(host_scalar.shape()));
  return cuda::to_device(tensor_from_f32({host_scalar.to_f32()[0]}, {1}));
}

// Where a layer runs: a float32 island (patch projections, output heads), a bf16 GEMM, a full
// AdaLN projection (bf16, or int8 W8A8 where the file stores int8: adaln_int8_cuda.h), or a
// block projection, which can also run the fp8, int8 and NVFP4 GEMMs.
enum class LinearPath { f32_island, bf16, adaln, projection };

// Weights are uploaded in the dtype their path computes in, from the exact float values: bf16 and
// f32 layers unchanged; fp8_scaled layers dequantized (e4m3 values are exact in bf16, so this is
// round_bf16(e4m3 * weight_scale), as ComfyUI computes a layer without input_scale), except block
// projections with a static input_scale, or opted into dynamic activation scales
// (LinearWeight::fp8_dynamic_activations), which keep e4m3 weights for the fp8 GEMM.
// NVFP4 block projections keep their packed weights for the W4A4 GEMM.
// Quantized weight bytes, and bf16 weights of layers computing in bf16, already in device memory
// (a caller's state dict: Denoiser::create from tensors) are used where they are, without a
// copy: the caller keeps them alive and unchanged.
//
// Where a layer's weight matrix goes: the device, or, for a block streamed at load, the host
// tensor exactly as it would be uploaded (BlockImageWriter copies it into the block's pinned
// image). Counts the caller's device matrices used in place (`caller_bytes`). `kept`: the host
// tensors uploaded as stored from a mapped checkpoint (views that cost no host memory; heap
// tensors, e.g. LoRA-merged layers, are not kept), by their device copy's address
// (DeviceModel::block_sources).
struct Place {
  bool host = false;
  int64_t* caller_bytes = nullptr;
  std::map<const void*, Tensor>* kept = nullptr;
  Tensor operator()(const Tensor& t) const {  // a tensor as stored
    Tensor d = fresh(t);
    if (kept && t.device() == Device::cpu && d.device() == Device::cuda &&
        is_mapped_file_memory(t.data(), t.nbytes()))
      (*kept)[d.data()] = t;
    return d;
  }
  Tensor fresh(const Tensor& t) const {  // values the upload made
    if (t.device() == Device::cuda) {
      if (caller_bytes) *caller_bytes += t.nbytes();
      return t;
    }
    return host ? t : cuda::to_device(t);
  }
};

void upload_nvfp4(const LinearWeight& l, DeviceLinear& d, const Place& place) {
  H3RT_CHECK(
      l.data.is_contiguous() && l.scale.is_contiguous() && l.data.nbytes() == l.out * l.in / 2 &&
          l.scale.nbytes() == nvfp4_scales_bytes(l.out, l.in),
      "layer '", l.name, "': nvfp4 weight or weight_scale is not a contiguous packed tensor");
  d.w4 = place(l.data);
  d.w4_scales = place(l.scale);
  d.w4_global = device_scalar(l.scale_2, l.name + ".weight_scale_2");
  if (l.input_scale.data()) d.x4_global = device_scalar(l.input_scale, l.name + ".input_scale");
}

// int8 layers (block projections, full-form AdaLN layers, patch projections, condition_proj,
// output heads) keep their stored int8 weight (rotated when convrot) and per-row scales: no
// bf16 or f32 copy.
void upload_int8(const LinearWeight& l, DeviceLinear& d, const Place& place) {
  H3RT_CHECK(l.data.dtype() == DType::i8 && l.data.is_contiguous(), "layer '", l.name,
             "': int8 weight is not a contiguous i8 tensor");
  H3RT_CHECK(l.int8_group == 0 || l.in % l.int8_group == 0, "layer '", l.name,
             "' is int8_convrot with group size ", l.int8_group, ", which does not divide its ",
             l.in, " input features");
  d.wi8 = place(l.data);
  d.wi8_scale = cuda::to_device(tensor_from_f32(int8_row_scales(l.scale, l.out), {l.out}));
  d.int8_group = static_cast<int>(l.int8_group);
}

DType upload_dtype(const LinearWeight& l, LinearPath path) {
  return path == LinearPath::f32_island && l.format != WeightFormat::int8 ? DType::f32
                                                                          : DType::bf16;
}

// fp8 block projections with a static input scale, or marked dynamic, run on the fp8 GEMMs from
// their stored bytes; other fp8 layers run dequantized.
bool fp8_as_stored(const LinearWeight& l, LinearPath path) {
  return path == LinearPath::projection && l.format == WeightFormat::fp8_scaled &&
         (l.input_scale.data() != nullptr || l.fp8_dynamic_activations);
}

bool bf16_as_stored(const LinearWeight& l, LinearPath path) {
  return l.format == WeightFormat::bf16 && l.data.dtype() == DType::bf16 &&
         upload_dtype(l, path) == DType::bf16 && l.data.is_contiguous() && l.w.empty();
}

// The stored tensors upload_linear keeps as they are (CUDA ones: used in place); none where it
// computes the layer's values.
std::vector<const Tensor*> stored_as_is(const LinearWeight& l, LinearPath path) {
  if (l.format == WeightFormat::nvfp4) return {&l.data, &l.scale};
  if (l.format == WeightFormat::int8 || fp8_as_stored(l, path) || bf16_as_stored(l, path))
    return {&l.data};
  return {};
}

DeviceLinear upload_linear(const LinearWeight& l, LinearPath path, const Place& place = {}) {
  const MemoryScope scope("the weights of layer " + l.name);
  H3RT_CHECK(l.format != WeightFormat::nvfp4 || path == LinearPath::projection, "layer '", l.name,
             "' is nvfp4; the CUDA backend runs nvfp4 in the block projections (qkv, out, fc1, "
             "fc2) only");
  // int8 layers run as W8A8 on every path (bf16 bias: the epilogue's, h3rt::int8_linear's).
  const bool int8 = l.format == WeightFormat::int8;
  const DType t = upload_dtype(l, path);
  DeviceLinear d;
  d.out = l.out;
  d.in = l.in;
  if (l.has_bias()) d.b = upload_values(l.b, {l.out}, t);
  if (l.format == WeightFormat::nvfp4) {
    upload_nvfp4(l, d, place);
    return d;
  }
  if (int8) {
    upload_int8(l, d, place);
    return d;
  }
  if (fp8_as_stored(l, path)) {
    H3RT_CHECK(l.data.dtype() == DType::e4m3 && l.data.is_contiguous(), "layer '", l.name,
               "': fp8 weight is not a contiguous e4m3 tensor");
    d.w8 = place(l.data);
    d.w_scale = device_scalar(l.scale, l.name + ".weight_scale");
    if (l.input_scale.data()) d.x_scale = device_scalar(l.input_scale, l.name + ".input_scale");
    return d;
  }
  // Stored bf16 on a bf16 path: the bytes as stored (the caller's device memory used in place,
  // a host view uploaded, or streamed), never through f32 values (round_bf16(float(b)) = b).
  if (bf16_as_stored(l, path)) {
    d.w = place(l.data);
    return d;
  }
  // A layer without f32 values (quantized and run densely, e.g. fp8 without an input scale, or
  // loaded without dense copies) gets them for this upload only: kept, they would cost 4 bytes
  // per weight.
  const bool cached = !l.w.empty();
  const FloatVec& dense = dense_weight(l);
  d.w = place.fresh(
      tensor_from_f32(std::vector<float>(dense.begin(), dense.end()), {l.out, l.in}, t));
  if (!cached) FloatVec().swap(l.w);
  return d;
}

Tensor upload_norm(const FloatVec& v) {
  return upload_values(v, {static_cast<int64_t>(v.size())}, DType::bf16);
}

}  // namespace

namespace {

DeviceBlock upload_block(const RefinerBlockWeights& w, const Place& place) {
  DeviceBlock d;
  d.norm1 = upload_norm(w.norm1);
  d.norm2 = upload_norm(w.norm2);
  d.q_norm = upload_norm(w.attn.q_norm);
  d.k_norm = upload_norm(w.attn.k_norm);
  d.qkv = upload_linear(w.attn.qkv, LinearPath::projection, place);
  d.out = upload_linear(w.attn.out, LinearPath::projection, place);
  d.fc1 = upload_linear(w.mlp.fc1, LinearPath::projection, place);
  d.fc2 = upload_linear(w.mlp.fc2, LinearPath::projection, place);
  return d;
}

}  // namespace

DeviceBlock upload_block(const RefinerBlockWeights& w) {
  return upload_block(w, Place{});
}

namespace {

// ---- synthesis (the hash of synthetic.cpp, evaluated on the device) -----------------------

// Element e: u = top 24 bits of splitmix64(base + e) mapped exactly to [-1, 1); a norm gain is
// 1 + 0.1 u, anything else u * scale. Products and sums are rounded singly (no FMA), as on the
// host, so the values are bit-identical to the CPU's.
template <typename T>
__global__ void synth_kernel(T* out, int64_t n, uint64_t base, float scale, bool norm) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = splitmix64(base + static_cast<uint64_t>(e));
    const float u = __fadd_rn(__fmul_rn(static_cast<float>(h >> 40), 1.0f / 8388608.0f), -1.0f);
    const float v = norm ? __fadd_rn(1.0f, __fmul_rn(0.1f, u)) : __fmul_rn(u, scale);
    if constexpr (sizeof(T) == 2)
      out[e] = __float2bfloat16_rn(v);
    else
      out[e] = v;
  }
}

struct Synth {
  uint64_t seed;
  std::map<std::string, std::pair<size_t, WeightSpec>> specs;  // key -> (index, spec)
  std::map<std::string, int64_t> fan_in;

  Synth(const H3Config& c, uint64_t s) : seed(s) {
    const auto list = weight_specs(c);
    int64_t fan = 1;
    for (size_t k = 0; k < list.size(); ++k) {
      if (list[k].shape.size() == 2) fan = list[k].shape[1];  // a bias follows its weight
      specs[list[k].key] = {k, list[k]};
      fan_in[list[k].key] = fan;
    }
  }

  Tensor tensor(const std::string& key) const {
    const MemoryScope scope("synthetic weight " + key);
    const auto& [k, spec] = specs.at(key);
    Tensor t = cuda::device_empty(spec.dtype, spec.shape);
    const uint64_t base = splitmix64(seed ^ splitmix64(k));
    const bool norm =
        spec.shape.size() == 1 && key.size() > 7 && key.compare(key.size() - 7, 7, ".weight") == 0;
    const float scale = 1.0f / std::sqrt(static_cast<float>(fan_in.at(key)));
    const int64_t n = t.numel();
    const int grid = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
    if (spec.dtype == DType::bf16)
      synth_kernel<<<grid, 256>>>(t.ptr<__nv_bfloat16>(), n, base, scale, norm);
    else
      synth_kernel<<<grid, 256>>>(t.ptr<float>(), n, base, scale, norm);
    H3RT_CUDA_CHECK(cudaGetLastError());
    return t;
  }

  DeviceLinear linear(const std::string& name, bool bias) const {
    DeviceLinear d;
    d.w = tensor(name + ".weight");
    d.out = d.w.size(0);
    d.in = d.w.size(1);
    if (bias) d.b = tensor(name + ".bias");
    return d;
  }

  DeviceBlock block(const std::string& p, bool adaln) const {
    DeviceBlock d;
    d.norm1 = tensor(p + "norm1.weight");
    d.norm2 = tensor(p + "norm2.weight");
    d.q_norm = tensor(p + "attn.q_norm.weight");
    d.k_norm = tensor(p + "attn.k_norm.weight");
    d.qkv = linear(p + "attn.qkv_proj", false);
    d.out = linear(p + "attn.out_proj", false);
    d.fc1 = linear(p + "mlp.fc1", false);
    d.fc2 = linear(p + "mlp.fc2", false);
    if (adaln) d.adaln = linear(p + "adaln_proj.linear", true);
    return d;
  }
};

FloatVec download(const Tensor& t) {
  std::vector<float> v = cuda::to_host(t).to_f32();
  return FloatVec(v.begin(), v.end());
}

}  // namespace

bool DeviceModel::has_fp8() const {
  for (const auto* list : {&refiner, &blocks})
    for (const DeviceBlock& b : *list)
      if (b.qkv.fp8() || b.out.fp8() || b.fc1.fp8() || b.fc2.fp8()) return true;
  return false;
}

bool DeviceModel::has_int8() const {
  for (const auto* list : {&refiner, &blocks})
    for (const DeviceBlock& b : *list)
      if (b.qkv.int8() || b.out.int8() || b.fc1.int8() || b.fc2.int8()) return true;
  return false;
}

bool DeviceModel::has_int8_adaln() const {
  if (final_adaln.int8()) return true;
  for (const DeviceBlock& b : blocks)
    if (b.adaln.int8()) return true;
  return false;
}

bool DeviceModel::has_int8_io() const {
  for (const DeviceLinear* l : {&video_in, &audio_in, &text_in, &video_out, &audio_out})
    if (l->int8()) return true;
  return false;
}

bool DeviceModel::has_nvfp4() const {
  for (const auto* list : {&refiner, &blocks})
    for (const DeviceBlock& b : *list)
      if (b.qkv.nvfp4() || b.out.nvfp4() || b.fc1.nvfp4() || b.fc2.nvfp4()) return true;
  return false;
}

namespace {

// A bank's float values only (the session combines its heads on the host each step).
LinearWeight host_bank(const LinearWeight& l) {
  LinearWeight h;
  h.name = l.name;
  h.format = WeightFormat::f32;
  h.out = l.out;
  h.in = l.in;
  h.w = dense_weight(l);
  h.b = l.b;
  return h;
}

DeviceLinear upload_head(const LinearWeight& l, int64_t pdd_heads) {
  if (pdd_heads == 1) return upload_linear(l, LinearPath::f32_island);
  DeviceLinear d;  // shapes of one head; the session owns the effective head's buffers
  d.out = l.out / pdd_heads;
  d.in = l.in;
  return d;
}

}  // namespace

namespace {

// The kept host tensor of each of b's streamed tensors (undefined where none), in slot order.
std::vector<Tensor> sources_of(DeviceBlock& b, const std::map<const void*, Tensor>& kept) {
  std::vector<Tensor> v;
  for (const auto& [name, t] : streamed_tensors(b)) {
    auto it = kept.find(t->data());
    const bool same =
        it != kept.end() && it->second.nbytes() == t->nbytes() && it->second.is_contiguous();
    v.push_back(same ? it->second : Tensor());
  }
  return v;
}

}  // namespace

namespace {

// The curve form's AdaLN layers compute in float32 (adaln_curve_linear_cuda).
LinearPath adaln_path(const H3Config& c) {
  return c.adaln_curve() ? LinearPath::f32_island : LinearPath::adaln;
}

}  // namespace

namespace {

// Bytes of l's CUDA tensors that upload_linear uses in place on `path`.
int64_t in_place_bytes(const LinearWeight& l, LinearPath path) {
  int64_t n = 0;
  for (const Tensor* t : stored_as_is(l, path))
    if (t->data() && t->device() == Device::cuda) n += t->nbytes();
  return n;
}

int64_t in_place_bytes(const RefinerBlockWeights& b) {
  int64_t n = 0;
  for (const LinearWeight* l : {&b.attn.qkv, &b.attn.out, &b.mlp.fc1, &b.mlp.fc2})
    n += in_place_bytes(*l, LinearPath::projection);
  return n;
}

int64_t in_place_bytes(const BlockWeights& b, const H3Config& c) {
  return in_place_bytes(static_cast<const RefinerBlockWeights&>(b)) +
         in_place_bytes(b.adaln, adaln_path(c));
}

}  // namespace

int64_t in_place_device_bytes(const H3Model& m) {
  const H3Weights& w = m.weights;
  // As upload_model places them (a PDD bank's heads are combined on the host).
  int64_t n = in_place_bytes(w.video_in, LinearPath::f32_island) +
              in_place_bytes(w.audio_in, LinearPath::f32_island) +
              in_place_bytes(w.text_in, LinearPath::bf16) +
              in_place_bytes(w.final_adaln, adaln_path(m.config));
  if (m.config.pdd_heads == 1)
    n += in_place_bytes(w.video_out, LinearPath::f32_island) +
         in_place_bytes(w.audio_out, LinearPath::f32_island);
  for (const RefinerBlockWeights& b : w.refiner) n += in_place_bytes(b);
  for (const BlockWeights& b : w.blocks) n += in_place_bytes(b, m.config);
  return n;
}

std::vector<int64_t> in_place_blocks(const H3Model& m) {
  std::vector<int64_t> v;
  for (size_t i = 0; i < m.weights.blocks.size(); ++i)
    if (in_place_bytes(m.weights.blocks[i], m.config) > 0) v.push_back(static_cast<int64_t>(i));
  return v;
}

DeviceModel upload_model(const H3Model& m, BlockImageWriter* stream, bool keep_block_sources,
                         const BlockProgress& progress) {
  const H3Weights& w = m.weights;
  const H3Config& c = m.config;
  const LinearPath adaln = adaln_path(c);
  DeviceModel d;
  d.config = c;
  d.video_in = upload_linear(w.video_in, LinearPath::f32_island);
  d.audio_in = upload_linear(w.audio_in, LinearPath::f32_island);
  d.text_in = upload_linear(w.text_in, LinearPath::bf16);
  d.final_adaln = upload_linear(w.final_adaln, adaln);
  d.video_out = upload_head(w.video_out, c.pdd_heads);
  d.audio_out = upload_head(w.audio_out, c.pdd_heads);
  if (c.pdd_heads > 1) {
    d.video_bank = host_bank(w.video_out);
    d.audio_bank = host_bank(w.audio_out);
  }
  for (const auto& b : w.refiner) d.refiner.push_back(upload_block(b));
  std::map<const void*, Tensor> kept;
  const int64_t n = static_cast<int64_t>(w.blocks.size());
  if (progress) progress(0, n);
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    const bool streams = stream && stream->streams(i);
    const Place place{streams, &d.caller_block_bytes, keep_block_sources ? &kept : nullptr};
    const int64_t caller_before = d.caller_block_bytes;
    d.blocks.push_back(upload_block(w.blocks[i], place));
    d.blocks.back().adaln = upload_linear(w.blocks[i].adaln, adaln, place);
    const bool caller = d.caller_block_bytes > caller_before;
    if (caller) d.caller_blocks.push_back(static_cast<int64_t>(i));
    if (place.kept) {
      d.block_sources.push_back(sources_of(d.blocks.back(), kept));
      kept.clear();
    }
    if (streams) {
      H3RT_CHECK(!caller, "device_memory_limit: block ", i, " (blocks.", i,
                 ".*) holds weight matrices that are the caller's CUDA tensors, used in place; "
                 "streaming them would copy them to host memory and free none of their device "
                 "memory. Pass the state dict as CPU tensors (h3rt then streams them from pinned "
                 "host memory), or raise the limit");
      stream->write(i, d.blocks.back());  // the block's host matrices are dropped here
    }
    if (progress) progress(static_cast<int64_t>(i) + 1, n);
  }
  if (stream) d.streamed = stream->finish();
  d.refiner_norm = upload_norm(w.refiner_norm);
  d.final_norm = upload_norm(w.final_norm);
  d.time_in_w = dense_weight(w.time_in);
  d.time_in_b = w.time_in.b;
  d.time_out_w = dense_weight(w.time_out);
  d.time_out_b = w.time_out.b;
  d.adaln_t_table = w.adaln_t_table;
  d.rope_inv_freq.assign(w.rope_inv_freq.begin(), w.rope_inv_freq.end());
  return d;
}

void convert_linear_to_int8(DeviceLinear& l, int group, cudaStream_t s) {
  H3RT_CHECK(l.w.dtype() == DType::bf16 && (group == 0 || l.in % group == 0),
             "convert_linear_to_int8: layer [", l.out, ", ", l.in,
             "] must be bf16 with its inputs a multiple of the group ", group);
  l.wi8 = cuda::device_empty(DType::i8, {l.out, l.in});
  l.wi8_scale = cuda::device_empty(DType::f32, {l.out});
  l.int8_group = group;
  ops::Int8QuantizeCudaParams q;
  q.x = l.w.ptr<__nv_bfloat16>();
  q.q = l.wi8.ptr<int8_t>();
  q.scale = l.wi8_scale.ptr<float>();
  q.rows = l.out;
  q.k = l.in;
  q.group = group;
  H3RT_CUDA_CHECK(ops::int8_quantize_rows_cuda(q, s));
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));  // the bf16 weight returns to the arena
  l.w = Tensor();
}

void convert_linear_to_nvfp4(DeviceLinear& l, float input_scale, cudaStream_t s) {
  H3RT_CHECK(l.w.dtype() == DType::bf16 && l.in % 16 == 0, "convert_linear_to_nvfp4: layer [",
             l.out, ", ", l.in, "] must be bf16 with in % 16 == 0");
  l.w4 = cuda::device_empty(DType::u8, {l.out, l.in / 2});
  l.w4_scales = cuda::device_empty(DType::u8, {nvfp4_scales_bytes(l.out, l.in)});
  l.w4_global = cuda::device_empty(DType::f32, {1});
  Tensor ws = cuda::device_empty(DType::u8, {int64_t(nvfp4_quantize_workspace_bytes())});
  H3RT_CUDA_CHECK(cudaMemsetAsync(ws.data(), 0, ws.nbytes(), s));
  Nvfp4QuantizeParams q;
  q.x = l.w.data();
  q.rows = l.out;
  q.cols = l.in;
  q.ld = l.in;
  q.qdata = l.w4.ptr<uint8_t>();
  q.scales = l.w4_scales.ptr<uint8_t>();
  q.global_scale = l.w4_global.ptr<float>();
  q.source = Nvfp4GlobalScaleSource::kTwoPass;
  q.rule = Nvfp4ScaleRule::kF32Divide;
  q.workspace = ws.data();
  H3RT_CUDA_CHECK(nvfp4_quantize(q, s));
  if (input_scale > 0.0f) l.x4_global = cuda::to_device(tensor_from_f32({input_scale}, {1}));
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));  // `ws` and the bf16 weight return to the arena
  l.w = Tensor();
}

DeviceModel make_synthetic_device_model(const H3Config& c, uint64_t seed,
                                        const std::function<void(size_t, DeviceBlock&)>& each) {
  c.validate();
  H3RT_CHECK(!c.adaln_curve() && c.pdd_heads == 1,
             "synthetic device models have the full AdaLN and plain output heads");
  Synth s(c, seed);
  DeviceModel d;
  d.config = c;
  d.video_in = s.linear("video_patch_proj", true);
  d.audio_in = s.linear("audio_patch_proj", true);
  d.text_in = s.linear("condition_proj", true);
  d.final_adaln = s.linear("final_layer.adaln_proj.linear", true);
  d.video_out = s.linear("final_layer.video_out", true);
  d.audio_out = s.linear("final_layer.audio_out", true);
  for (int64_t i = 0; i < c.refiner_layers; ++i)
    d.refiner.push_back(s.block("token_refiner.blocks." + std::to_string(i) + ".", false));
  for (int64_t i = 0; i < c.layers; ++i) {
    d.blocks.push_back(s.block("blocks." + std::to_string(i) + ".", true));
    if (!each) continue;
    H3RT_CUDA_CHECK(cudaDeviceSynchronize());  // each may work on another stream
    each(static_cast<size_t>(i), d.blocks.back());
  }
  d.refiner_norm = s.tensor("token_refiner.final_norm.weight");
  d.final_norm = s.tensor("final_layer.norm.weight");
  d.time_in_w = download(s.tensor("time_embedder.proj_in.weight"));
  d.time_in_b = download(s.tensor("time_embedder.proj_in.bias"));
  d.time_out_w = download(s.tensor("time_embedder.proj_out.weight"));
  d.time_out_b = download(s.tensor("time_embedder.proj_out.bias"));
  d.rope_inv_freq = ops::rope_inv_freq(c.rope_freqs, c.rope_theta);
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  return d;
}

}  // namespace h3rt::model
