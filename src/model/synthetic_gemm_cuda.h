// The block GEMM formats of a synthetic device model: what `h3rt bench step --gemm` and
// `h3rt sample --gemm` (DenoiserOptions::synthetic_gemm) run on the presets' random weights.
#pragma once

#include <cuda_runtime_api.h>

#include "h3rt/pipeline.h"
#include "model/model_cuda.h"

namespace h3rt::model {

// Converts every block projection (qkv, out, fc1, fc2) of a model of synthetic bf16 weights
// (values within +-1/sqrt(in)) on the device: fp8 e4m3 with static per-tensor scales (w_scale
// 1/sqrt(in)/448, inputs up to 8), int8 W8A8 as int8_convrot with convrot group `int8_group`
// (convert_linear_to_int8), or NVFP4 W4A4 with a static input scale for inputs up to 8
// (convert_linear_to_nvfp4). bf16 changes nothing. The bf16 copies are released.
void quantize_synthetic_blocks(DeviceModel& model, SyntheticGemm format, int int8_group,
                               cudaStream_t stream);

}  // namespace h3rt::model
