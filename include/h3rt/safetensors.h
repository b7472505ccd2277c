// safetensors files: read through a read-only memory map (tensors are views into it), write
// from host tensors. The header is validated as the format requires: an 8-byte little-endian
// length that fits in the file, JSON that parses to an object, known dtypes, data offsets
// inside the data section that match shape x dtype size and do not overlap. Every violation
// throws h3rt::Error naming the file and, where there is one, the tensor.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "h3rt/tensor.h"

namespace h3rt {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  int64_t begin = 0;  // byte offsets relative to the data section
  int64_t end = 0;
};

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);
  // The same validation over a file image already in memory (`name` stands for the path in
  // messages; `owner` keeps `bytes` alive for the views get() returns). The fuzz targets use it.
  static SafetensorsFile parse(const std::string& name, std::shared_ptr<void> owner,
                               const void* bytes, size_t size);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // header order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const;
  const SafetensorsEntry* find(const std::string& name) const;
  // A view into the mapping; throws naming the file if the tensor is absent.
  Tensor get(const std::string& name) const;
  // Like get(), also checking dtype and shape, with a message naming file, tensor and expectation.
  Tensor get(const std::string& name, DType dtype, const Shape& shape) const;

 private:
  std::string path_;
  std::shared_ptr<void> mapping_;
  const char* data_ = nullptr;  // start of the data section
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes host tensors (any strides; written contiguous) in the given order, atomically
// (a temporary file renamed into place), so an interrupted write never leaves a truncated file.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace h3rt
