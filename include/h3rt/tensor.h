// Tensor: a view (pointer, shape, strides in elements, dtype, device) that may share ownership
// of the memory it views (a host buffer, a mapped file, a device allocation).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "h3rt/check.h"
#include "h3rt/dtype.h"

namespace h3rt {

enum class Device : uint8_t { cpu, cuda };

using Shape = std::vector<int64_t>;

class Tensor {
 public:
  Tensor() = default;
  // A contiguous view over `data`; `owner` keeps it alive (may be null for borrowed memory).
  Tensor(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner = nullptr,
         Device device = Device::cpu);
  Tensor(void* data, DType dtype, Shape shape, Shape strides, std::shared_ptr<void> owner,
         Device device);

  // A new zero-filled contiguous host tensor, allocated through the tracked allocator.
  static Tensor zeros(DType dtype, Shape shape);

  void* data() const { return data_; }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the back
  int64_t stride(int64_t d) const;
  int64_t numel() const;
  int64_t nbytes() const { return numel() * dtype_size(dtype_); }
  bool is_contiguous() const;
  bool defined() const { return data_ != nullptr || numel() == 0; }

  // Views: same memory, different shape/strides.
  Tensor reshape(Shape shape) const;  // contiguous tensors only
  Tensor slice(int64_t d, int64_t begin, int64_t end) const;
  Tensor select(int64_t d, int64_t index) const;  // drops dimension d

  // A contiguous host copy with the same dtype.
  Tensor contiguous_copy() const;
  // Host values converted to float32 (from f64, f32, bf16, f16, e4m3, integers).
  std::vector<float> to_f32() const;
  std::vector<double> to_f64() const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
  Shape shape_;
  Shape strides_;
  std::shared_ptr<void> owner_;
};

std::string shape_str(const Shape& s);
Shape contiguous_strides(const Shape& shape);
int64_t shape_numel(const Shape& shape);

// Host tensor from float values, stored as `dtype` (f32, f64, bf16, f16, e4m3) with RNE rounding.
Tensor tensor_from_f32(const std::vector<float>& values, Shape shape, DType dtype = DType::f32);

}  // namespace h3rt
