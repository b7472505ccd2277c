// Arrays in CUDA device memory as a host hands them to h3rt (the Python package, the ComfyUI
// node, a server): the layout views and copies a device forward needs (ForwardInputs::device),
// and stream-ordered device buffers. CUDA-free: streams are cudaStream_t values as uintptr_t
// (0: the legacy default stream). Without CUDA the device functions throw.
#pragma once

#include <cstdint>
#include <memory>

#include "h3rt/tensor.h"

namespace h3rt {

// dst = src element by element: the same shape (at most 8 axes), any strides, dtypes f32 or bf16
// (f32 -> bf16 rounds to nearest even). Both on the host (a loop, the reference) or both in CUDA
// device memory (one kernel on `stream`, no synchronisation; the same bits).
void copy_strided(const Tensor& dst, const Tensor& src, uintptr_t stream = 0);

// ComfyUI's video latents [1, C, T, H, W] (any strides, H and W even) viewed as h3rt's patch
// rows: [T, H/2, W/2, C, 2, 2], whose C order is patchify_video's ([Nv, 4C] rows). Copying the
// view into contiguous rows patchifies; copying contiguous rows into the view unpatchifies.
Tensor video_rows_view(const Tensor& latents);
// ComfyUI's audio latents [1, C, 2, N] viewed as h3rt's rows [2, N, C] (row ch*N + j).
Tensor comfy_audio_rows_view(const Tensor& latents);

// The current CUDA device's index; -1 without CUDA or a device.
int cuda_current_device();
// The compute capability of CUDA device `device` as major * 10 + minor (90 for an H100, 121 for
// a GB10); 0 without CUDA or that device.
int cuda_device_cc(int device);
// The device index of CUDA memory at `p` (a pointer from another framework); -1 for host memory.
int cuda_pointer_device(const void* p);
// `bytes` of device memory allocated on `stream` (stream-ordered: cudaMallocAsync) and freed on
// that stream when the last owner lets go; the caller orders other streams' use of it.
std::shared_ptr<void> device_alloc(size_t bytes, uintptr_t stream);
// A contiguous f32 device tensor of `shape` in such memory.
Tensor device_f32(const Shape& shape, uintptr_t stream);
// Copies device memory to the host on `stream` and waits for that stream (not the device).
void copy_to_host(void* dst, const void* src, size_t bytes, uintptr_t stream);

}  // namespace h3rt
