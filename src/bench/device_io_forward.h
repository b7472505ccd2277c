// ComfyUI-layout latents in CUDA device memory for `h3rt bench step --device-io`, which times
// forward_device_latents (h3rt/pipeline.h: what the Python module runs for torch CUDA latents,
// here without Python) as tools/device/py_overhead.py times the Python call, so their difference
// is the Python overhead.
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

}  // namespace h3rt::bench
