// CUDA arrays in and out of the extension (a CUDA model's device forward): torch and cupy
// through DLPack, others through __cuda_array_interface__; float32 or bfloat16, any strides.
// Inputs that are float32 and contiguous are read where they are; others get one device copy
// (the strided_copy kernel). Results are new CUDA arrays (torch tensors for torch inputs) or the
// caller's out= arrays, written on the call's stream.
#pragma once

#include <optional>

#include "arrays.h"
#include "h3rt/device.h"

namespace h3rt::py {

// A CUDA array: a device view (strides in elements), its device index, whether it is torch's.
struct CudaArray {
  Tensor view;
  int device = -1;
  bool torch = false;
};

// `obj` as a CUDA array, or nullopt for a host array (or anything that is not an array). Other
// device types (ROCm, Metal, ...) raise ValueError naming `name`.
std::optional<CudaArray> cuda_array(nb::handle obj, const char* name);

// The device call of a CUDA model: its device, the stream (a stream= keyword: None, an int
// handle or an object with .cuda_stream; None: torch's current stream for torch inputs, else
// the legacy default stream) and whether results are torch tensors.
struct DeviceCall {
  int device = 0;
  uintptr_t stream = 0;
  bool torch = false;
};
DeviceCall device_call(nb::handle stream, const CudaArray& first, int model_device);

// Checks a (video or audio) CUDA input: on the call's device, float32 or bfloat16.
void check_input(const CudaArray& a, const char* name, const DeviceCall& call);

// `view` (a view of an input, e.g. video_rows_view) as contiguous float32 of the same shape:
// the memory itself when it already is, else a stream-ordered copy.
Tensor contiguous_f32(const Tensor& view, const DeviceCall& call);

// A result: the Python object handed back and the device view h3rt writes.
struct DeviceResult {
  nb::object obj;
  Tensor view;
};
// A new float32 CUDA array of `shape` on the call's device (torch.empty for torch calls).
DeviceResult new_result(const std::vector<int64_t>& shape, const DeviceCall& call);
// out= element `obj`: a CUDA array of `shape` (float32 or bfloat16, any strides) on the device.
DeviceResult given_result(nb::handle obj, const char* name, const std::vector<int64_t>& shape,
                          const DeviceCall& call);

// The stream host_f32 copies CUDA arrays (text, condition items) on during a device call.
class StreamScope {
 public:
  explicit StreamScope(uintptr_t stream);
  ~StreamScope();

 private:
  uintptr_t saved_;
};
uintptr_t scoped_stream();
// A CUDA array's values on the host (f32 or bf16, any strides; a device copy, then a copy to the
// host on the scoped stream, which is waited for): text and condition items of a device call.
FloatVec device_to_host_f32(const AnyArray& a, const char* name);

}  // namespace h3rt::py
