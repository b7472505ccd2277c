// libFuzzer target: the safetensors header parser (SafetensorsFile::parse, what open() runs on a
// mapped file) and views of every tensor it accepts.
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = h3rt::fuzz::parse_image(data, size);
  if (!f) return 0;
  volatile float sink = 0;
  for (const auto& e : f->entries()) {
    sink = sink + h3rt::fuzz::touch(f->get(e.name));
    try {
      f->get(e.name, h3rt::DType::f32, {1});  // the checked form: a mismatch is an Error
    } catch (const h3rt::Error&) {
    }
  }
  return 0;
}
