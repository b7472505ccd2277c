// Shared by the libFuzzer targets: the fuzzer's bytes as a safetensors image, and the rule that
// only h3rt::Error may leave the code under test (any other exception, crash, leak or sanitizer
// report is a finding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "h3rt/safetensors.h"

namespace h3rt::fuzz {

// The image parsed as a file named "fuzz.safetensors", or nothing when the parser refuses it.
inline std::optional<SafetensorsFile> parse_image(const uint8_t* data, size_t size) {
  try {
    return SafetensorsFile::parse("fuzz.safetensors", nullptr, data, size);
  } catch (const Error&) {
    return std::nullopt;
  }
}

// Reads every byte of a view (ASan checks it lies inside the image) and converts small tensors.
inline float touch(const Tensor& t) {
  float acc = 0;
  const auto* p = t.ptr<const unsigned char>();
  for (int64_t i = 0; i < t.nbytes(); ++i) acc += p[i];
  if (t.numel() <= (1 << 16))
    for (float v : t.to_f32()) acc += v == v ? 0.0f : 1.0f;
  return acc;
}

}  // namespace h3rt::fuzz
