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

// A multiplicative hash over every linear layer's stored data and working values, 8 bytes at a
// time (the tail bytewise): any changed bit changes it with overwhelming probability.
uint64_t weights_checksum(const H3Model& m) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, b + i, 8);
      h = (h ^ w) * 0x9E3779B97F4A7C15ull;
      h ^= h >> 29;
    }
    for (; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
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
  bool merged = false;  // merge_loras was entered: the weights must be checked afterwards
  try {
    const Lora lora = read_lora(std::make_shared<const SafetensorsFile>(std::move(*f)),
                                LoraSpec{"fuzz.safetensors", size % 3 == 0 ? 0.5 : 1.0});
    for (const auto& p : lora.pairs) fuzz::touch(p.up), fuzz::touch(p.down);
    lora_target_groups(lora);
    LoraOptions o;
    o.skip_unmatched = size % 2 == 1;
    merged = true;
    LoraMerge merge = merge_loras(m, {lora}, o);
    unmerge_loras(m, merge);
  } catch (const Error&) {
  }
  if (merged && weights_checksum(m) != before) {
    std::fprintf(stderr, "fuzz_lora: the model's weights differ after merge + unmerge\n");
    std::abort();
  }
  return 0;
}
