#include "bench/device_io_forward.h"
#include "cuda/runtime.h"
#include "h3rt/device.h"

namespace h3rt::bench {
namespace {

// The patch rows' 6-axis view [T, H/2, W/2, C, 2, 2] (video_rows_view's shape).
Shape patch_axes(const H3Config& c, const SequenceLayout& l) {
  return {l.frames, l.height / 2, l.width / 2, c.in_channels, 2, 2};
}
Shape audio_axes(const H3Config& c, const SequenceLayout& l) {
  return {2, l.audio_len, c.audio_channels};
}

}  // namespace

DeviceLatents device_latents(const H3Config& c, const SequenceLayout& l, uintptr_t stream) {
  return {device_f32({1, c.in_channels, l.frames, l.height, l.width}, stream),
          device_f32({1, c.audio_channels, 2, l.audio_len}, stream)};
}

DeviceLatents upload_latents(const H3Config& c, const Request& r, uintptr_t stream) {
  const SequenceLayout& l = r.layout;
  H3RT_CHECK(static_cast<int64_t>(r.video_rows.size()) == l.video_rows() * c.video_features() &&
                 static_cast<int64_t>(r.audio_rows.size()) == l.audio_rows() * c.audio_channels,
             "upload_latents: the request's rows do not match its layout");
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  const Tensor v = device_f32({l.video_rows(), c.video_features()}, stream),
               a = device_f32({l.audio_rows(), c.audio_channels}, stream);
  H3RT_CUDA_CHECK(
      cudaMemcpyAsync(v.data(), r.video_rows.data(), v.nbytes(), cudaMemcpyHostToDevice, s));
  H3RT_CUDA_CHECK(
      cudaMemcpyAsync(a.data(), r.audio_rows.data(), a.nbytes(), cudaMemcpyHostToDevice, s));
  DeviceLatents out = device_latents(c, l, stream);
  copy_strided(video_rows_view(out.video), v.reshape(patch_axes(c, l)), stream);
  copy_strided(comfy_audio_rows_view(out.audio), a.reshape(audio_axes(c, l)), stream);
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));  // the host rows may go once this returns
  return out;
}

}  // namespace h3rt::bench
