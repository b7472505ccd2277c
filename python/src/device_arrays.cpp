#include "device_arrays.h"

#include <Python.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

namespace h3rt::py {
namespace {

thread_local uintptr_t g_stream = 0;

bool is_torch(nb::handle obj) {
  const nb::object mod = nb::getattr(obj.type(), "__module__", nb::none());
  return nb::isinstance<nb::str>(mod) && nb::cast<std::string>(mod).rfind("torch", 0) == 0;
}

std::optional<DType> f32_or_bf16(const nb::dlpack::dtype& d) {
  if (d == nb::dtype<float>()) return DType::f32;
  if (d.code == uint8_t(nb::dlpack::dtype_code::Bfloat) && d.bits == 16) return DType::bf16;
  return std::nullopt;
}

// A CUDA array through DLPack (torch, cupy, jax, ...); f32/bf16 views only (others: TypeError
// when used as rows, reported by check_input via the dtype).
CudaArray from_dlpack(const AnyArray& a, bool torch) {
  const Shape shape = dims(a);
  Shape strides(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) strides[i] = a.stride(i);
  const DType t = f32_or_bf16(a.dtype()).value_or(DType::u8);  // u8: "not float32/bfloat16"
  return {Tensor(const_cast<void*>(a.data()), t, shape, strides, nullptr, Device::cuda),
          static_cast<int>(a.device_id()), torch};
}

// __cuda_array_interface__ (numba, older cupy): float32 only (the protocol has no bfloat16).
CudaArray from_interface(nb::handle obj, const char* name) {
  const nb::dict d = nb::cast<nb::dict>(obj.attr("__cuda_array_interface__"));
  const std::string typestr = nb::cast<std::string>(d["typestr"]);
  const auto shape = nb::cast<std::vector<int64_t>>(d["shape"]);
  const auto data = nb::cast<nb::tuple>(d["data"]);
  void* p = reinterpret_cast<void*>(nb::cast<uintptr_t>(data[0]));
  const DType t = typestr == "<f4" ? DType::f32 : DType::u8;
  Shape strides = contiguous_strides(shape);
  if (d.contains("strides") && !d["strides"].is_none()) {
    const auto bytes = nb::cast<std::vector<int64_t>>(d["strides"]);
    for (size_t i = 0; i < bytes.size() && i < strides.size(); ++i) strides[i] = bytes[i] / 4;
  }
  if (t != DType::f32)
    raise_type(std::string(name) + ": a __cuda_array_interface__ array of typestr '" + typestr +
               "'; expected float32 ('<f4'; bfloat16 arrays go in through DLPack)");
  return {Tensor(p, t, shape, strides, nullptr, Device::cuda), cuda_pointer_device(p), false};
}

uintptr_t stream_handle(nb::handle s) {
  if (nb::isinstance<nb::int_>(s)) return nb::cast<uintptr_t>(s);
  for (const char* attr : {"cuda_stream", "ptr"})
    if (nb::hasattr(s, attr)) return nb::cast<uintptr_t>(s.attr(attr));
  raise_type(
      "stream: expected None, an int handle or an object with .cuda_stream (e.g. "
      "torch.cuda.Stream), got " +
      nb::cast<std::string>(nb::str(s.type())));
}

void check_f32_or_bf16(const Tensor& view, const char* name) {
  if (view.dtype() != DType::f32 && view.dtype() != DType::bf16)
    raise_type(std::string(name) + ": expected float32 or bfloat16 values on the device");
}

DeviceResult wrap(Tensor t, const DeviceCall& call) {
  auto* keep = new Tensor(t);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  nb::ndarray<float> a(t.data(), shape.size(), shape.data(), owner, nullptr, nb::dtype<float>(),
                       nb::device::cuda::value, call.device);
  return {nb::cast(a), std::move(t)};
}

}  // namespace

std::optional<CudaArray> cuda_array(nb::handle obj, const char* name) {
  AnyArray a;
  if (nb::try_cast(obj, a)) {
    if (a.device_type() == nb::device::cpu::value) return std::nullopt;
    if (a.device_type() != nb::device::cuda::value)
      raise_value(std::string(name) + ": an array on device type " +
                  std::to_string(a.device_type()) + "; h3rt reads host or CUDA memory");
    return from_dlpack(a, is_torch(obj));
  }
  if (nb::hasattr(obj, "__cuda_array_interface__")) return from_interface(obj, name);
  return std::nullopt;
}

DeviceCall device_call(nb::handle stream, const CudaArray& first, int model_device) {
  DeviceCall c;
  c.device = model_device;
  c.torch = first.torch;
  if (!stream.is_none())
    c.stream = stream_handle(stream);
  else if (first.torch)
    c.stream = nb::cast<uintptr_t>(nb::module_::import_("torch")
                                       .attr("cuda")
                                       .attr("current_stream")(model_device)
                                       .attr("cuda_stream"));
  return c;
}

void check_input(const CudaArray& a, const char* name, const DeviceCall& call) {
  if (a.device != call.device)
    raise_value(std::string(name) + ": a CUDA array on device " + std::to_string(a.device) +
                ", the model runs on cuda:" + std::to_string(call.device) +
                "; move it there (tensor.to('cuda:" + std::to_string(call.device) + "'))");
  check_f32_or_bf16(a.view, name);
}

Tensor contiguous_f32(const Tensor& view, const DeviceCall& call) {
  if (view.dtype() == DType::f32 && view.is_contiguous()) return view;
  Tensor out = device_f32(view.shape(), call.stream);
  copy_strided(out, view, call.stream);
  return out;
}

DeviceResult new_result(const std::vector<int64_t>& shape, const DeviceCall& call) {
  if (!call.torch) return wrap(device_f32(shape, call.stream), call);
  const nb::module_ torch = nb::module_::import_("torch");
  nb::object t = torch.attr("empty")(nb::cast(shape), nb::arg("dtype") = torch.attr("float32"),
                                     nb::arg("device") = "cuda:" + std::to_string(call.device));
  void* p = reinterpret_cast<void*>(nb::cast<uintptr_t>(t.attr("data_ptr")()));
  return {t, Tensor(p, DType::f32, shape, nullptr, Device::cuda)};
}

DeviceResult given_result(nb::handle obj, const char* name, const std::vector<int64_t>& shape,
                          const DeviceCall& call) {
  const std::optional<CudaArray> a = cuda_array(obj, name);
  if (!a)
    raise_value(std::string(name) + ": expected a CUDA array of shape " + shape_str(shape) +
                " (the outputs of a device forward stay on the device)");
  check_input(*a, name, call);
  if (a->view.shape() != Shape(shape.begin(), shape.end()))
    raise_value(std::string(name) + ": expected shape " + shape_str(shape) + ", got " +
                shape_str(a->view.shape()));
  return {nb::borrow(obj), a->view};
}

FloatVec device_to_host_f32(const AnyArray& a, const char* name) {
  const CudaArray c = from_dlpack(a, false);
  check_f32_or_bf16(c.view, name);
  DeviceCall call;
  call.stream = g_stream;
  const Tensor t = contiguous_f32(c.view, call);
  FloatVec out(static_cast<size_t>(t.numel()));
  copy_to_host(out.data(), t.data(), out.size() * 4, call.stream);
  return out;
}

StreamScope::StreamScope(uintptr_t stream) : saved_(g_stream) {
  g_stream = stream;
}
StreamScope::~StreamScope() {
  g_stream = saved_;
}
uintptr_t scoped_stream() {
  return g_stream;
}

}  // namespace h3rt::py
