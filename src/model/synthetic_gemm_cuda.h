// The block GEMM formats of a synthetic device model: what `h3rt bench step --gemm` and
// `h3rt sample --gemm` (DenoiserOptions::synthetic_gemm) run on the presets' random weights.
#pragma once

#include <cuda_runtime_api.h>

#include "h3rt/pipeline.h"
#include "model/model_cuda.h"
#include "model/weight_stream_plan.h"

namespace h3rt::model {

// Converts every block projection (qkv, out, fc1, fc2) of a model of synthetic bf16 weights
// (values within +-1/sqrt(in)) on the device: fp8 e4m3 with static per-tensor scales (w_scale
// 1/sqrt(in)/448, inputs up to 8), int8 W8A8 as int8_convrot with convrot group `int8_group`
// (convert_linear_to_int8), or NVFP4 W4A4 with a static input scale for inputs up to 8
// (convert_linear_to_nvfp4). bf16 changes nothing. The bf16 copies are released.
void quantize_synthetic_blocks(DeviceModel& model, SyntheticGemm format, int int8_group,
                               cudaStream_t stream);
// The same for one block.
void quantize_synthetic_block(DeviceBlock& block, SyntheticGemm format, int int8_group,
                              cudaStream_t stream);

// The storage quantize_synthetic_blocks gives the blocks, and the refiner's (bf16).
BlockStorage synthetic_block_storage(const H3Config& c, SyntheticGemm format);

class BlockwiseLoraMergeCuda;  // model/lora_cuda.h

// make_synthetic_device_model, `lora` merged (as merge_loras_cuda), then
// quantize_synthetic_blocks: the same bits, made block by block (each block merged and
// converted before the next is made). With `stream` (a LoadPlan that streams) each block it
// streams is also written to its pinned image before the next is made: the device holds the
// resident part and one block's bf16 weights and converted copy at most, never the model (the
// cost: one device-to-host copy of each streamed block's image, e.g. 0.9 GB per block for the
// int8 h3 preset).
// `source`: where the streamed blocks go (file: pageable host copies, which exercises the file
// source's gather without a checkpoint).
DeviceModel make_synthetic_gemm_model(const H3Config& c, uint64_t seed, SyntheticGemm format,
                                      int int8_group, const LoadPlan* stream = nullptr,
                                      BlockwiseLoraMergeCuda* lora = nullptr,
                                      WeightStreamSource source = WeightStreamSource::pinned,
                                      const BlockProgress& progress = {});

}  // namespace h3rt::model
