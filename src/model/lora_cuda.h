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
#include "model/lora_internal.h"
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

// The same merge for a model made block by block (a synthetic preset streamed at load, each
// block leaving the device before the next is made): the plan over the config's layer shapes
// up front, each transformer block's layers merged as it is made, every other layer once the
// model is complete. Same pairs, scales and bits as merge_loras_cuda; no originals are kept.
class BlockwiseLoraMergeCuda {
 public:
  BlockwiseLoraMergeCuda(const H3Config& config, std::vector<Lora> loras,
                         const LoraOptions& options);
  void merge_block(size_t i, DeviceBlock& block, cudaStream_t stream);  // blocks.<i>.*
  void merge_rest(DeviceModel& model, cudaStream_t stream);  // every layer outside blocks.*
  const LoraMergeReport& report() const { return plan_.report; }

 private:
  std::vector<Lora> loras_;  // the plan points into their pairs
  LoraPlan plan_;
  H3Config config_;
};

}  // namespace h3rt::model
#endif  // H3RT_HAVE_CUDA
