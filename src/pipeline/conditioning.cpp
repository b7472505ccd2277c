// Condition latents of a request: the layout signature they imply and their rows after noise
// augmentation (conditioning.h).
#include "h3rt/conditioning.h"

#include "h3rt/check.h"
#include "h3rt/sampler.h"

namespace h3rt {
namespace {

void check_video(const VideoLatent& v, int64_t channels, const char* what) {
  H3RT_CHECK(v.height > 0 && v.width > 0 && v.height % 2 == 0 && v.width % 2 == 0, what,
             ": latent height and width must be positive and even, got ", v.height, " x ", v.width);
  H3RT_CHECK(static_cast<int64_t>(v.data.size()) == channels * v.frames * v.height * v.width, what,
             ": ", v.data.size(), " values, expected [", channels, ", ", v.frames, ", ", v.height,
             ", ", v.width, "]");
}

void check_audio(const AudioLatent& a, int64_t channels, const char* what) {
  H3RT_CHECK(static_cast<int64_t>(a.data.size()) == 2 * channels * a.len, what, ": ", a.data.size(),
             " values, expected [2, ", channels, ", ", a.len, "]");
}

// Noise for n augmented values: the caller's, or h3rt's draw restarted at offset 0.
FloatVec noise_for(const FloatVec& given, int64_t n, uint64_t seed, uint64_t stream,
                   const char* what) {
  if (!given.empty()) {
    H3RT_CHECK(static_cast<int64_t>(given.size()) == n, what, ": noise has ", given.size(),
               " values, expected ", n, " (the condition's rows)");
    return given;
  }
  FloatVec noise(n);
  gaussian_noise(seed, stream, 0, noise.data(), n);
  return noise;
}

void add_video(FloatVec& out, const VideoLatent& v, const FloatVec& noise, const Conditioning& c,
               int64_t channels, const char* what) {
  check_video(v, channels, what);
  FloatVec rows = patchify_video(v.data.data(), channels, v.frames, v.height, v.width);
  const int64_t n = static_cast<int64_t>(rows.size());
  if (c.aug.video < 1.0) {
    const FloatVec z = noise_for(noise, n, c.noise_seed, kCondVideoNoiseStream, what);
    augment_condition_rows(rows.data(), z.data(), n, c.aug.video);
  }
  out.insert(out.end(), rows.begin(), rows.end());
}

void add_audio(FloatVec& out, const AudioLatent& a, const FloatVec& noise, const Conditioning& c,
               int64_t channels, const char* what) {
  check_audio(a, channels, what);
  FloatVec rows = audio_latents_to_rows(a.data.data(), channels, a.len);
  const int64_t n = static_cast<int64_t>(rows.size());
  if (c.aug.audio < 1.0) {
    const FloatVec z = noise_for(noise, n, c.noise_seed, kCondAudioNoiseStream, what);
    augment_condition_rows(rows.data(), z.data(), n, c.aug.audio);
  }
  out.insert(out.end(), rows.begin(), rows.end());
}

ReferenceSlot reference_slot(const ReferenceCond& r) {
  ReferenceSlot s{r.kind, r.video.frames, r.video.height, r.video.width, r.audio.len};
  switch (r.kind) {
    case ReferenceKind::image:
      H3RT_CHECK(r.video.frames == 1 && r.audio.empty(),
                 "image reference: needs a one-frame video latent and no audio, got ",
                 r.video.frames, " frames and ", r.audio.len, " audio latents");
      break;
    case ReferenceKind::video:
      H3RT_CHECK(r.video.frames > 0, "video reference: needs a video latent");
      break;
    case ReferenceKind::audio:
      H3RT_CHECK(r.video.empty() && !r.audio.empty(),
                 "audio reference: needs an audio latent and no video latent");
      s.frames = s.height = s.width = 0;
      break;
  }
  return s;
}

}  // namespace

LayoutSpec layout_spec(const Conditioning& c, int64_t L, int64_t N, int64_t T, int64_t H,
                       int64_t W) {
  LayoutSpec s{L, N, T, H, W, c.text_tags, {}, {}};
  for (const KeyframeCond& k : c.keyframes) {
    H3RT_CHECK(!k.video.empty() || !k.audio.empty(), "keyframe at frame ", k.frame_index,
               ": needs a video or an audio latent");
    H3RT_CHECK(k.video.empty() || (k.video.height == H && k.video.width == W), "keyframe at frame ",
               k.frame_index, ": its latent is ", k.video.height, " x ", k.video.width,
               ", expected the target's ", H, " x ", W);
    s.keyframes.push_back({k.frame_index, k.video.frames, k.audio.len});
  }
  for (const ReferenceCond& r : c.refs) s.refs.push_back(reference_slot(r));
  H3RT_CHECK(c.video_mask.empty() || static_cast<int64_t>(c.video_mask.size()) == T * H * W,
             "video denoise mask: ", c.video_mask.size(), " values, expected [", T, ", ", H, ", ",
             W, "]");
  H3RT_CHECK(c.audio_mask.empty() || static_cast<int64_t>(c.audio_mask.size()) == 2 * N,
             "audio denoise mask: ", c.audio_mask.size(), " values, expected [2, ", N, "]");
  return s;
}

ConditionRows condition_rows(const Conditioning& c, int64_t vc, int64_t ac) {
  ConditionRows out;
  for (const KeyframeCond& k : c.keyframes) {
    if (!k.video.empty()) add_video(out.video, k.video, k.noise.video, c, vc, "keyframe video");
    if (!k.audio.empty()) add_audio(out.audio, k.audio, k.noise.audio, c, ac, "keyframe audio");
  }
  for (const ReferenceCond& r : c.refs) {
    if (!r.video.empty()) add_video(out.video, r.video, r.noise.video, c, vc, "reference video");
    if (!r.audio.empty()) add_audio(out.audio, r.audio, r.noise.audio, c, ac, "reference audio");
  }
  return out;
}

RowMasks row_masks(const Conditioning& c, const SequenceLayout& l) {
  RowMasks m;
  if (!c.video_mask.empty())
    m.video = video_mask_rows(c.video_mask.data(), l.frames, l.height, l.width);
  if (!c.audio_mask.empty()) m.audio = audio_mask_rows(c.audio_mask.data(), l.audio_len);
  return m;
}

}  // namespace h3rt
