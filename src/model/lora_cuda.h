// LoRA merge into a model on the GPU (h3rt/lora.h; the kernels in src/ops/lora_merge): the
// same pairs, scales and bits as merge_loras on the host, for layers the device holds in bf16 or
// f32 (w) or as int8 W8A8 (wi8 + per-row scales). Other device layers (fp8, nvfp4, the
// host-side time embedder, PDD banks) are refused by name: merge those on the host. The
// originals of the touched layers are kept (moved out, not copied) so that unmerge restores them.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <string>
#include <utility>
#include <vector>

#include "h3rt/lora.h"
#include "model/model_cuda.h"

namespace h3rt::model {

struct LoraMergeCuda {
  std::vector<std::pair<std::string, DeviceLinear>> saved;
  LoraMergeReport report;
};

// The device model's linear layers by their original key prefixes.
std::map<std::string, DeviceLinear*> device_linear_layers(DeviceModel& model);

LoraMergeCuda merge_loras_cuda(DeviceModel& model, const std::vector<Lora>& loras,
                               const LoraOptions& options = {}, cudaStream_t stream = nullptr);
void unmerge_loras_cuda(DeviceModel& model, LoraMergeCuda& merge);

}  // namespace h3rt::model
#endif  // H3RT_HAVE_CUDA
