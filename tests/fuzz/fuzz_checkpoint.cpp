// libFuzzer target: the checkpoint loader on a file image: config inference from shapes and key
// counts, the per-layer variant detection (comfy_quant markers, __metadata__
// _quantization_metadata, qkv_layout, fp8/nvfp4/int8 layouts, curve-form AdaLN, PDD banks, VSA
// keys) and the validating assembly with dequantization, with f32 copies at load or on demand.
#include "fuzz_util.h"
#include "h3rt/lora.h"
#include "h3rt/model.h"
#include "model/weights.h"

using namespace h3rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = fuzz::parse_image(data, size);
  if (!f) return 0;
  try {
    const H3Config c = infer_config(*f);
    model::TensorSource src;
    model::add_source_file(src, *f, QkvLayout::autodetect);
    for (const auto& e : f->entries()) {
      model::is_gate_compress_key(c, e.name);
      const std::string w = ".weight";
      if (e.name.size() > w.size() && e.name.compare(e.name.size() - w.size(), w.size(), w) == 0)
        model::linear_format_label(src, e.name.substr(0, e.name.size() - w.size()));
    }
    // Both load forms: f32 copies at load (the CPU backend) or on demand (CUDA), then the
    // finite scan and the dense values of every layer as the on-demand form computes them.
    const bool dense = (size & 1) == 0;
    H3Model m{c, model::assemble_weights(c, src, dense)};
    if (!dense) {
      check_weights_finite(m);
      for (auto& [name, l] : linear_layers(m.weights)) dense_weight(*l);
    }
  } catch (const Error&) {
  }
  return 0;
}
