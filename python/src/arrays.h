// Arrays in and out of the extension: any DLPack / buffer-protocol array (numpy; torch and
// cupy when present) checked for dtype, device and shape with errors naming the argument, and
// numpy results owning h3rt's buffers.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>
#include <vector>

#include "h3rt/memory.h"
#include "h3rt/tensor.h"

namespace h3rt::py {

namespace nb = nanobind;
using AnyArray = nb::ndarray<nb::ro>;
using NumpyF32 = nb::ndarray<nb::numpy, float>;

// Python exceptions from C++: sets the error and throws nb::python_error (nanobind rethrows it
// as is). One mechanism for every error the extension raises itself.
[[noreturn]] void raise(PyObject* type, const std::string& msg);
[[noreturn]] void raise_value(const std::string& msg);
[[noreturn]] void raise_type(const std::string& msg);

// The array's shape.
Shape dims(const AnyArray& a);
// The array's shape, or a ValueError naming `name` unless it matches `want` (-1: any size).
// `expected` spells the shape for the message, e.g. "[1, 24, T, H, W]".
std::vector<int64_t> check_shape(const AnyArray& a, const char* name,
                                 const std::vector<int64_t>& want, const std::string& expected);
std::vector<int64_t> check_shape(const std::vector<int64_t>& shape, const char* name,
                                 const std::vector<int64_t>& want, const std::string& expected);
// Host float32 values (any strides) of `a`: TypeError unless float32, ValueError for a device
// array on a CPU model; a CUDA array on a CUDA model (float32 or bfloat16) is copied to the host
// (device_to_host_f32: text and condition items, which h3rt reads on the host).
FloatVec host_f32(const AnyArray& a, const char* name, bool cuda_model);
// Host integer (int32/int64) or float64 values, for layouts and timestep plans.
std::vector<int64_t> host_ints(const AnyArray& a, const char* name, int64_t count);
std::vector<double> host_f64(const AnyArray& a, const char* name, int64_t count);
std::vector<float> host_f32_vector(const AnyArray& a, const char* name);

// A view of a state-dict entry (no copy): host arrays, and for a CUDA model (`cuda_model`) also
// CUDA arrays, which the loader accepts only as quantized '.weight' bytes (used in place);
// TypeError for unsupported dtypes, ValueError for other devices.
Tensor tensor_view(const AnyArray& a, const std::string& key, bool cuda_model);

NumpyF32 to_numpy(FloatVec values, std::vector<size_t> shape);
nb::object to_numpy_i64(const std::vector<int64_t>& values, std::vector<size_t> shape);
nb::object to_numpy_f64(const std::vector<double>& values, std::vector<size_t> shape);

}  // namespace h3rt::py
