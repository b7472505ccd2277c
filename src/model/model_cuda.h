// The H3 model on the GPU: device copies of the weights in the release's dtypes (bf16, with the
// float32 islands kept in float32) and the bf16 forward pass, with the same inputs and outputs
// as forward_cpu so the CLI and the sampler can use either backend.
//
// The forward follows the reference's bf16 run (README section 6): the time embedding runs on
// the host in float32 (a few rows); AdaLN tables, condition_proj, the token refiner, the blocks
// and the final norm run in bf16 on the GPU through src/ops launchers (int8 AdaLN layers as W8A8
// GEMMs, adaln_int8_cuda.h); the patch projections and output heads are float32 GEMMs (cuBLAS,
// TF32 off), or W8A8 where the file stores them int8 (io_int8_cuda.h, as condition_proj).
//
// Curve-form AdaLN (config.adaln_curve()): the table row is interpolated on the host (float32,
// adaln_curve_embed_cpu) and the [M, k] x [k, 18H] projections run in float32 on the device
// (adaln_curve_linear_cuda, bit-exact with the CPU reference); the final layer's modulation
// stays float32 (curve_modulate_cuda). PDD head banks: each step's effective heads are computed
// on the host from the banks (model/pdd_head.h) and uploaded by the session.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "h3rt/model.h"
#include "h3rt/tensor.h"
#include "model/block_cuda.h"

namespace h3rt::model {

struct StreamedBlocks;  // model/weight_stream_cuda.h
class BlockImageWriter;

struct DeviceModel {
  H3Config config;
  DeviceLinear video_in, audio_in, text_in, final_adaln, video_out, audio_out;
  std::vector<DeviceBlock> refiner, blocks;
  Tensor refiner_norm, final_norm;
  // Host float32 copies of the small time MLP and the RoPE frequencies (host-side work).
  FloatVec time_in_w, time_in_b, time_out_w, time_out_b;
  std::vector<float> rope_inv_freq;
  FloatVec adaln_t_table;  // curve form: [grid, rank] (host); its AdaLN layers are float32
  // PDD head bank (config.pdd_heads > 1): the banks' float32 values on the host (w and b only);
  // video_out / audio_out then carry the per-head shapes and no weights.
  LinearWeight video_bank, audio_bank;
  // Set by stream_block_weights: the blocks' weight matrices live in pinned host memory (their
  // DeviceBlock tensors are host views) and forward sessions stream them into device slots.
  std::shared_ptr<const StreamedBlocks> streamed;
  // Per block, the host tensors its streamable matrices were uploaded from where they are views
  // of a mapped checkpoint holding the same bytes (undefined where the upload converted or the
  // bytes are in heap memory), in slot order: kept by upload_model(keep_block_sources) so that
  // streaming from the file later (stream_block_weights, source file) reads them, not copies.
  std::vector<std::vector<Tensor>> block_sources;
  // Bytes of the blocks' streamable matrices used in place from the caller's device memory (a
  // state dict of CUDA tensors), and the blocks holding any (ascending): streaming those would
  // free none of it, so such blocks stay resident.
  int64_t caller_block_bytes = 0;
  std::vector<int64_t> caller_blocks;

  bool has_fp8() const;         // any block projection on the fp8 GEMM path
  bool has_nvfp4() const;       // any block projection on the NVFP4 GEMM path
  bool has_int8() const;        // any block projection on the int8 W8A8 path
  bool has_int8_adaln() const;  // any AdaLN layer (a block's or the final one's) stored int8
  // Any patch projection, condition_proj or output head stored int8 (W8A8 through the block
  // buffers' int8 activation: io_int8_cuda.h).
  bool has_int8_io() const;
};

// Uploads a loaded (or synthetic) model: bf16/f32 layers as stored; fp8_scaled block projections
// with an input_scale, or marked by set_fp8_activations(dynamic), as e4m3 (fp8 GEMMs; the latter
// with per-call activation scales), other fp8_scaled layers dequantized to bf16; NVFP4 block
// projections packed (W4A4 GEMMs); NVFP4 elsewhere is refused by name; int8 block projections
// and every other int8 layer (an unpruned int8 file's adaln_proj.linear; patch projections,
// condition_proj and heads a file stores int8) as stored (W8A8 GEMMs, bit-exact with the CPU
// reference's layer; no bf16 copy). The time embedder's two layers run on the host in float32
// from their dense values in both backends; a PDD bank's heads are combined in float32 from
// their dense values (the curve form's AdaLN is never int8).
// With `stream` (the streamed load): each block's streamed matrices are made on the host exactly
// as they would be uploaded and written to its pinned image, never allocated on the device; the
// model comes back streamed. Throws when a block's matrices are the caller's CUDA tensors.
// keep_block_sources: fill DeviceModel::block_sources (for a later streaming from the file).
// progress(done, total): (0, n) first, then after each transformer block.
using BlockProgress = std::function<void(int64_t done, int64_t total)>;
DeviceModel upload_model(const H3Model& model, BlockImageWriter* stream = nullptr,
                         bool keep_block_sources = false, const BlockProgress& progress = {});

// Bytes of the model's weights that are CUDA tensors upload_model uses in place (a state dict of
// the caller's device tensors): device memory the caller already holds, of which the upload
// makes no copy. Layers it converts (fp8 run dequantized, float32 islands) are not counted.
int64_t in_place_device_bytes(const H3Model& model);
// The transformer blocks holding such tensors (ascending): upload_model's caller_blocks, known
// before the upload (they stay resident under a limit).
std::vector<int64_t> in_place_blocks(const H3Model& model);

// The same synthetic weights as make_synthetic_model (bit-identical values), generated directly
// on the GPU, so the release-sized preset needs no host copy of its 33B parameters.
// `each_block(i, block)`, when given, runs on each transformer block as soon as it is made,
// before the next (the streamed load converts it and writes it to its pinned image there).
DeviceModel make_synthetic_device_model(
    const H3Config& config, uint64_t seed,
    const std::function<void(size_t, DeviceBlock&)>& each_block = {});

// Re-packs a bf16 device layer as NVFP4 on the device, as quantize-checkpoint packs weights
// (global scale amax / 2688 in fp32), with a static activation scale `input_scale`, or none
// (0: computed per call); the bf16 copy is dropped. For synthetic models in benchmarks and tests.
void convert_linear_to_nvfp4(DeviceLinear& l, float input_scale, cudaStream_t stream);
// Turns a bf16 block projection into an int8 W8A8 one on the device, as quantize-checkpoint
// --format int8_convrot does on the host (the same row rule: int8_quantize_rows_cuda applied to
// the weight), with convrot group `group` (0: plain int8). The bf16 weight is released.
void convert_linear_to_int8(DeviceLinear& l, int group, cudaStream_t stream);

// One forward in bf16 (the only GPU precision); host inputs and outputs as forward_cpu.
ForwardOutputs forward_cuda(const DeviceModel& model, const ForwardInputs& inputs);

}  // namespace h3rt::model
#endif  // H3RT_HAVE_CUDA
