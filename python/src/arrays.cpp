#include "arrays.h"

#include <Python.h>

#include <cstring>

#include "device_arrays.h"

namespace h3rt::py {
namespace {

// DLPack 1.1's kDLFloat8_e4m3fn (torch.float8_e4m3fn exports it), spelled as a number: older
// nanobind releases name no float8 codes.
constexpr uint8_t kDLFloat8E4M3FN = 10;

std::string dtype_str(const AnyArray& a) {
  const auto d = a.dtype();
  if (d.code == kDLFloat8E4M3FN && d.bits == 8) return "float8_e4m3fn";
  const char* kind = d.code == uint8_t(nb::dlpack::dtype_code::Float)    ? "float"
                     : d.code == uint8_t(nb::dlpack::dtype_code::Int)    ? "int"
                     : d.code == uint8_t(nb::dlpack::dtype_code::UInt)   ? "uint"
                     : d.code == uint8_t(nb::dlpack::dtype_code::Bfloat) ? "bfloat"
                                                                         : "other";
  return std::string(kind) + std::to_string(d.bits) +
         (std::string(kind) == "other" ? " (DLPack type code " + std::to_string(d.code) + ")" : "");
}

bool on_host(const AnyArray& a) {
  return a.device_type() == nb::device::cpu::value;
}

void check_host(const AnyArray& a, const char* name, bool cuda_model) {
  if (on_host(a)) return;
  if (cuda_model)
    raise_value(std::string(name) + ": an array on device type " + std::to_string(a.device_type()) +
                "; h3rt reads host or CUDA memory");
  raise_value(
      (std::string(name) + ": a device array, but the model runs on the CPU; pass a host array")
          .c_str());
}

// Calls f(flat_offset_in_elements) for every element in C order.
template <class F>
void for_each_offset(const AnyArray& a, F&& f) {
  const size_t nd = a.ndim();
  if (a.size() == 0) return;
  std::vector<int64_t> idx(nd, 0);
  for (size_t n = 0; n < a.size(); ++n) {
    int64_t off = 0;
    for (size_t d = 0; d < nd; ++d) off += idx[d] * a.stride(d);
    f(off);
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < static_cast<int64_t>(a.shape(d))) break;
      idx[d] = 0;
    }
  }
}

template <class T, class Out>
void copy_as(const AnyArray& a, Out& out) {
  const T* p = static_cast<const T*>(a.data());
  size_t k = 0;
  for_each_offset(a,
                  [&](int64_t off) { out[k++] = static_cast<typename Out::value_type>(p[off]); });
}

}  // namespace

void raise(PyObject* type, const std::string& msg) {
  PyErr_SetString(type, msg.c_str());
  throw nb::python_error();
}
void raise_value(const std::string& msg) {
  raise(PyExc_ValueError, msg);
}
void raise_type(const std::string& msg) {
  raise(PyExc_TypeError, msg);
}

Shape dims(const AnyArray& a) {
  Shape s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = static_cast<int64_t>(a.shape(i));
  return s;
}

std::vector<int64_t> check_shape(const AnyArray& a, const char* name,
                                 const std::vector<int64_t>& want, const std::string& expected) {
  return check_shape(dims(a), name, want, expected);
}

std::vector<int64_t> check_shape(const std::vector<int64_t>& s, const char* name,
                                 const std::vector<int64_t>& want, const std::string& expected) {
  bool ok = s.size() == want.size();
  for (size_t i = 0; ok && i < want.size(); ++i) ok = want[i] < 0 || s[i] == want[i];
  if (!ok)
    raise_value(std::string(name) + ": expected shape " + expected + ", got " + shape_str(s));
  return s;
}

FloatVec host_f32(const AnyArray& a, const char* name, bool cuda_model) {
  if (cuda_model && a.device_type() == nb::device::cuda::value) return device_to_host_f32(a, name);
  if (a.dtype() != nb::dtype<float>())
    raise_type((std::string(name) + ": expected float32 values, got " + dtype_str(a)).c_str());
  check_host(a, name, cuda_model);
  FloatVec out(a.size());
  copy_as<float>(a, out);
  return out;
}

std::vector<float> host_f32_vector(const AnyArray& a, const char* name) {
  FloatVec v = host_f32(a, name, false);
  return std::vector<float>(v.begin(), v.end());
}

std::vector<int64_t> host_ints(const AnyArray& a, const char* name, int64_t count) {
  check_host(a, name, false);
  if (static_cast<int64_t>(a.size()) != count)
    raise_value((std::string(name) + ": expected " + std::to_string(count) + " values, got shape " +
                 shape_str(dims(a)))
                    .c_str());
  std::vector<int64_t> out(a.size());
  if (a.dtype() == nb::dtype<int64_t>())
    copy_as<int64_t>(a, out);
  else if (a.dtype() == nb::dtype<int32_t>())
    copy_as<int32_t>(a, out);
  else
    raise_type(
        (std::string(name) + ": expected int64 or int32 values, got " + dtype_str(a)).c_str());
  return out;
}

std::vector<double> host_f64(const AnyArray& a, const char* name, int64_t count) {
  check_host(a, name, false);
  if (a.dtype() != nb::dtype<double>())
    raise_type((std::string(name) + ": expected float64 values, got " + dtype_str(a)).c_str());
  if (static_cast<int64_t>(a.size()) != count)
    raise_value((std::string(name) + ": expected " + std::to_string(count) + " values, got shape " +
                 shape_str(dims(a)))
                    .c_str());
  std::vector<double> out(a.size());
  copy_as<double>(a, out);
  return out;
}

Tensor tensor_view(const AnyArray& a, const std::string& key, bool cuda_model) {
  const auto d = a.dtype();
  // A CUDA model takes CUDA tensors as device views; which of them may stay in device memory
  // (the quantized '.weight' bytes) is the loader's rule (load_model), which names the others.
  if (!on_host(a) && (!cuda_model || a.device_type() != nb::device::cuda::value))
    raise_value("state dict '" + key + "': a device tensor of " + dtype_str(a) +
                (cuda_model ? "; only CUDA device memory is read" : "; the model runs on the CPU") +
                ": pass tensor.cpu()");
  DType t;
  if (d == nb::dtype<float>())
    t = DType::f32;
  else if (d == nb::dtype<double>())
    t = DType::f64;
  else if (d.code == uint8_t(nb::dlpack::dtype_code::Bfloat) && d.bits == 16)
    t = DType::bf16;
  else if (d.code == uint8_t(nb::dlpack::dtype_code::Float) && d.bits == 16)
    t = DType::f16;
  else if (d == nb::dtype<uint8_t>())
    t = DType::u8;
  else if (d == nb::dtype<int8_t>())
    t = DType::i8;
  else if (d == nb::dtype<int32_t>())
    t = DType::i32;
  else if (d == nb::dtype<int64_t>())
    t = DType::i64;
  else if (d.code == kDLFloat8E4M3FN && d.bits == 8)
    t = DType::e4m3;  // torch.float8_e4m3fn: ComfyUI's fp8_scaled weights
  else
    raise_type(("state dict '" + key + "': unsupported dtype " + dtype_str(a) +
                " (float32/64, bfloat16, float16, float8_e4m3fn, (u)int8, int32, int64)")
                   .c_str());
  Shape shape(a.ndim()), strides(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) {
    shape[i] = static_cast<int64_t>(a.shape(i));
    strides[i] = a.stride(i);
  }
  return Tensor(const_cast<void*>(a.data()), t, shape, strides, nullptr,
                on_host(a) ? Device::cpu : Device::cuda);
}

NumpyF32 to_numpy(FloatVec values, std::vector<size_t> shape) {
  auto* v = new FloatVec(std::move(values));
  nb::capsule owner(v, [](void* p) noexcept { delete static_cast<FloatVec*>(p); });
  return NumpyF32(v->data(), shape.size(), shape.data(), owner);
}

namespace {
template <class T>
nb::object owned_numpy(const std::vector<T>& values, std::vector<size_t> shape) {
  auto* v = new std::vector<T>(values);
  nb::capsule owner(v, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T>(v->data(), shape.size(), shape.data(), owner));
}
}  // namespace

nb::object to_numpy_i64(const std::vector<int64_t>& values, std::vector<size_t> shape) {
  return owned_numpy(values, std::move(shape));
}
nb::object to_numpy_f64(const std::vector<double>& values, std::vector<size_t> shape) {
  return owned_numpy(values, std::move(shape));
}

}  // namespace h3rt::py
