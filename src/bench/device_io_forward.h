// The Python module's device forward of ComfyUI-layout CUDA latents (python/src/h3rt_python.cpp
// device_request: forward_latents with torch CUDA tensors), in C++ without Python: per call, the
// patchify and the audio axis swap into new stream-ordered row buffers (strided_copy), new
// velocity row buffers, forward_request with EvalOptions::device on the caller's stream, and the
// inverse copies into the caller's output latents (Python's out=). Nothing waits for the GPU
// unless the forward itself does (its finite checks). `h3rt bench step --device-io` times it as
// tools/device/py_overhead.py times the Python call, so their difference is the Python overhead.
#pragma once

#include <cstdint>

#include "h3rt/pipeline.h"
#include "h3rt/tensor.h"

namespace h3rt::bench {

// ComfyUI-layout latents in device memory: video [1, C, T, H, W], audio [1, Ca, 2, N] (f32).
struct DeviceLatents {
  Tensor video, audio;
};

// New latents for `layout` (uninitialised), allocated on `stream`.
DeviceLatents device_latents(const H3Config& c, const SequenceLayout& layout, uintptr_t stream);
// `request`'s target rows (video_rows, audio_rows) as device latents (uploaded, then
// unpatchified on the device); complete for work queued on `stream` after it returns.
DeviceLatents upload_latents(const H3Config& c, const Request& request, uintptr_t stream);

// out = the velocities of `in` at video sigma `sigma` for `request`'s layout and text (its rows
// are not read), the work queued on `stream`, as Python's
// model.forward_latents(in.video, in.audio, sigma, text, out=(out.video, out.audio)).
void device_io_forward(Denoiser& d, const Request& request, float sigma, const DeviceLatents& in,
                       const DeviceLatents& out, uintptr_t stream);

}  // namespace h3rt::bench
