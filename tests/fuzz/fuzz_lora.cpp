// libFuzzer target: LoRA files (h3rt/lora.h): key-form parsing (ComfyUI's module names and
// suffixes, alpha, unsupported adapter kinds, pairs and ranks), matching against the tiny
// model's layers (targets, shapes, skip_unmatched), the merge arithmetic, and the unmerge, which
// must restore every layer bit for bit (a checksum of the working weights, checked after each
// merge that succeeded; a difference aborts as a finding).
#include <cstdlib>
#include <cstring>
#include <memory>

#include "fuzz_util.h"
#include "h3rt/lora.h"
#include "h3rt/model.h"

using namespace h3rt;

namespace {

H3Model& tiny_model() {
  static H3Model m = make_synthetic_model(H3Config::tiny(), 3);
  return m;
}

// FNV-1a over the bytes of every linear layer's stored data and working values.
uint64_t weights_checksum(const H3Model& m) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (const auto& [name, l] : linear_layers(const_cast<H3Model&>(m).weights)) {
    mix(name.data(), name.size());
    if (l->data.numel() > 0) mix(l->data.data(), static_cast<size_t>(l->data.nbytes()));
    mix(l->w.data(), l->w.size() * sizeof(float));
  }
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = fuzz::parse_image(data, size);
  if (!f) return 0;
  H3Model& m = tiny_model();
  static const uint64_t before = weights_checksum(m);
  try {
    const Lora lora = read_lora(std::make_shared<const SafetensorsFile>(std::move(*f)),
                                LoraSpec{"fuzz.safetensors", size % 3 == 0 ? 0.5 : 1.0});
    for (const auto& p : lora.pairs) fuzz::touch(p.up), fuzz::touch(p.down);
    lora_target_groups(lora);
    LoraOptions o;
    o.skip_unmatched = size % 2 == 1;
    LoraMerge merge = merge_loras(m, {lora}, o);
    unmerge_loras(m, merge);
  } catch (const Error&) {
  }
  if (weights_checksum(m) != before) {
    std::fprintf(stderr, "fuzz_lora: the model's weights differ after merge + unmerge\n");
    std::abort();
  }
  return 0;
}
