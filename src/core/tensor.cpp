#include "h3rt/tensor.h"

#include <cstring>
#include <sstream>

#include "h3rt/formats.h"
#include "h3rt/memory.h"

namespace h3rt {

Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

Tensor::Tensor(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner, Device device)
    : Tensor(data, dtype, shape, contiguous_strides(shape), std::move(owner), device) {}

Tensor::Tensor(void* data, DType dtype, Shape shape, Shape strides, std::shared_ptr<void> owner,
               Device device)
    : data_(data),
      dtype_(dtype),
      device_(device),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      owner_(std::move(owner)) {
  H3RT_CHECK(shape_.size() == strides_.size(), "tensor shape and strides differ in rank");
  for (int64_t d : shape_) H3RT_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape_));
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  size_t bytes = static_cast<size_t>(shape_numel(shape) * dtype_size(dtype));
  void* p = host_alloc(bytes);
  std::memset(p, 0, bytes);
  std::shared_ptr<void> owner(p, [bytes](void* q) { host_free(q, bytes); });
  return Tensor(p, dtype, std::move(shape), std::move(owner));
}

int64_t Tensor::size(int64_t d) const {
  if (d < 0) d += dim();
  H3RT_CHECK(d >= 0 && d < dim(), "dimension ", d, " out of range for shape ", shape_str(shape_));
  return shape_[d];
}

int64_t Tensor::stride(int64_t d) const {
  if (d < 0) d += dim();
  H3RT_CHECK(d >= 0 && d < dim(), "dimension ", d, " out of range for shape ", shape_str(shape_));
  return strides_[d];
}

int64_t Tensor::numel() const {
  return shape_numel(shape_);
}

bool Tensor::is_contiguous() const {
  int64_t acc = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != acc) return false;
    acc *= shape_[i];
  }
  return true;
}

Tensor Tensor::reshape(Shape shape) const {
  H3RT_CHECK(is_contiguous(), "reshape of a non-contiguous tensor");
  H3RT_CHECK(shape_numel(shape) == numel(), "cannot reshape ", shape_str(shape_), " to ",
             shape_str(shape));
  return Tensor(data_, dtype_, std::move(shape), owner_, device_);
}

Tensor Tensor::slice(int64_t d, int64_t begin, int64_t end) const {
  if (d < 0) d += dim();
  H3RT_CHECK(d >= 0 && d < dim(), "slice dimension out of range");
  H3RT_CHECK(0 <= begin && begin <= end && end <= shape_[d], "slice [", begin, ", ", end,
             ") out of range for dimension ", d, " of ", shape_str(shape_));
  Shape shape = shape_;
  shape[d] = end - begin;
  char* p = static_cast<char*>(data_) + begin * strides_[d] * dtype_size(dtype_);
  return Tensor(p, dtype_, std::move(shape), strides_, owner_, device_);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  Tensor s = slice(d, index, index + 1);
  if (d < 0) d += dim();
  Shape shape = s.shape_, strides = s.strides_;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return Tensor(s.data_, dtype_, std::move(shape), std::move(strides), owner_, device_);
}

namespace {

// Visit every element's byte offset in row-major order.
template <typename F>
void for_each_offset(const Shape& shape, const Shape& strides, F&& f) {
  int64_t n = shape_numel(shape);
  if (n == 0) return;
  Shape idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t k = 0; k < shape.size(); ++k) off += idx[k] * strides[k];
    f(off);
    for (size_t k = shape.size(); k-- > 0;) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
}

// An unaligned read of one T (tensor views into mapped files need not be aligned).
template <typename T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

double element_to_f64(const char* p, DType t) {
  switch (t) {
    case DType::f64:
      return load<double>(p);
    case DType::f32:
      return load<float>(p);
    case DType::bf16:
      return bf16_to_f32(load<uint16_t>(p));
    case DType::f16:
      return f16_to_f32(load<uint16_t>(p));
    case DType::e4m3:
      return e4m3_to_f32(load<uint8_t>(p));
    case DType::u8:
    case DType::e2m1x2:
      return load<uint8_t>(p);
    case DType::i8:
      return load<int8_t>(p);
    case DType::i32:
      return load<int32_t>(p);
    case DType::i64:
      return static_cast<double>(load<int64_t>(p));
  }
  return 0.0;
}

}  // namespace

Tensor Tensor::contiguous_copy() const {
  H3RT_CHECK(device_ == Device::cpu, "contiguous_copy needs a host tensor");
  Tensor out = zeros(dtype_, shape_);
  int64_t es = dtype_size(dtype_);
  char* dst = out.ptr<char>();
  const char* src = static_cast<const char*>(data_);
  for_each_offset(shape_, strides_, [&](int64_t off) {
    std::memcpy(dst, src + off * es, es);
    dst += es;
  });
  return out;
}

std::vector<double> Tensor::to_f64() const {
  H3RT_CHECK(device_ == Device::cpu, "to_f64 needs a host tensor");
  std::vector<double> out;
  out.reserve(static_cast<size_t>(numel()));
  int64_t es = dtype_size(dtype_);
  const char* src = static_cast<const char*>(data_);
  for_each_offset(shape_, strides_,
                  [&](int64_t off) { out.push_back(element_to_f64(src + off * es, dtype_)); });
  return out;
}

std::vector<float> Tensor::to_f32() const {
  std::vector<double> d = to_f64();
  return std::vector<float>(d.begin(), d.end());
}

Tensor tensor_from_f32(const std::vector<float>& values, Shape shape, DType dtype) {
  H3RT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
             "value count does not match shape ", shape_str(shape));
  Tensor t = Tensor::zeros(dtype, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i) {
    float v = values[i];
    switch (dtype) {
      case DType::f32:
        t.ptr<float>()[i] = v;
        break;
      case DType::f64:
        t.ptr<double>()[i] = v;
        break;
      case DType::bf16:
        t.ptr<uint16_t>()[i] = f32_to_bf16(v);
        break;
      case DType::f16:
        t.ptr<uint16_t>()[i] = f32_to_f16(v);
        break;
      case DType::e4m3:
        t.ptr<uint8_t>()[i] = f32_to_e4m3_satfinite(v);
        break;
      default:
        H3RT_FAIL("tensor_from_f32 cannot store ", dtype_name(dtype));
    }
  }
  return t;
}

}  // namespace h3rt
