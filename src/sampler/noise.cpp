// Host side of the seeded noise contract documented in sampler/noise.h.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF  // GCC ignores it; fp:: helpers guard there
#endif

#include "sampler/noise.h"

#include "h3rt/check.h"
#include "h3rt/sampler.h"

namespace h3rt {

void gaussian_noise(uint64_t seed, uint64_t stream, int64_t offset, float* out, int64_t n) {
  H3RT_CHECK(offset >= 0 && n >= 0, "gaussian_noise: offset (", offset, ") and count (", n,
             ") must be non-negative");
  if (n == 0) return;
  const uint64_t first = static_cast<uint64_t>(offset) / 4;
  const uint64_t last = (static_cast<uint64_t>(offset) + static_cast<uint64_t>(n) - 1) / 4;
  for (uint64_t b = first; b <= last; ++b)
    noise::gaussian_block_store(seed, stream, static_cast<uint64_t>(offset), out,
                                static_cast<uint64_t>(n), b);
}

InitialNoise initial_noise(uint64_t seed, const SequenceLayout& layout, int64_t video_channels,
                           int64_t audio_channels) {
  const int64_t T = layout.frames, H = layout.height, W = layout.width;
  FloatVec latent(video_channels * T * H * W);
  gaussian_noise(seed, kVideoNoiseStream, 0, latent.data(), static_cast<int64_t>(latent.size()));
  InitialNoise out;
  out.video_rows = patchify_video(latent.data(), video_channels, T, H, W);
  out.audio_rows.resize(layout.audio_rows() * audio_channels);
  gaussian_noise(seed, kAudioNoiseStream, 0, out.audio_rows.data(),
                 static_cast<int64_t>(out.audio_rows.size()));
  return out;
}

}  // namespace h3rt
