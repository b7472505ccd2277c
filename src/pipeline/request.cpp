// Requests: shapes from user sizes, seeded noise and stand-in text, or an inputs file.
#include <cmath>

#include "h3rt/formats.h"
#include "h3rt/pipeline.h"
#include "h3rt/safetensors.h"

namespace h3rt {
namespace {

constexpr int64_t kFramePattern[5] = {1, 4, 4, 4, 4};

void check_pixels(int64_t width, int64_t height) {
  H3RT_CHECK(width % 32 == 0 && height % 32 == 0 && width >= 0 && height >= 0,
             "width and height must be multiples of 32 (16x VAE compression and 2x2 patches), "
             "got ",
             width, "x", height);
}

// Stand-in text embeddings (seeded, stream 2, bf16 values) until a text encoder is wired in.
FloatVec stand_in_text(uint64_t seed, int64_t length, const H3Config& config) {
  FloatVec text(static_cast<size_t>(length * config.text_dim));
  gaussian_noise(seed, 2, 0, text.data(), static_cast<int64_t>(text.size()));
  for (float& x : text) x = round_bf16(x);
  return text;
}

Tensor text_tensor(const SafetensorsFile& f, const H3Config& config) {
  std::string name = f.contains("input/text_embeds") ? "input/text_embeds" : "text_embeds";
  Tensor t = f.get(name);
  H3RT_CHECK(t.dtype() == DType::bf16 || t.dtype() == DType::f32, f.path(), ": tensor '", name,
             "' is ", dtype_name(t.dtype()), ", expected bf16 or f32");
  bool ok = (t.dim() == 3 && t.size(0) == 1 && t.size(2) == config.text_dim) ||
            (t.dim() == 2 && t.size(1) == config.text_dim);
  H3RT_CHECK(ok, f.path(), ": tensor '", name, "' has shape ", shape_str(t.shape()),
             ", expected [1, L, ", config.text_dim, "] (text_dim of the model)");
  return t;
}

FloatVec to_floatvec(const Tensor& t) {
  std::vector<float> v = t.to_f32();
  return FloatVec(v.begin(), v.end());
}

}  // namespace

int64_t video_frames_for(int64_t latent_frames) {
  int64_t frames = 0;
  for (int64_t f = 0; f < latent_frames; ++f) frames += kFramePattern[f % 5];
  return frames;
}

int64_t latent_frames_for(int64_t video_frames) {
  H3RT_CHECK(video_frames >= 1, "frames must be at least 1, got ", video_frames);
  int64_t t = 0, frames = 0;
  while (frames < video_frames) frames += kFramePattern[t++ % 5];
  if (frames == video_frames) return t;
  H3RT_FAIL("frames ", video_frames, " is not a whole number of latent frames (each covers 1, ",
            "4, 4, 4, 4 video frames in turn); nearest valid counts: ", video_frames_for(t - 1),
            " and ", frames);
}

int64_t audio_latents_for(double seconds) {
  H3RT_CHECK(seconds > 0 && std::isfinite(seconds), "audio seconds must be positive, got ",
             seconds);
  // 1e-9 keeps decimal inputs such as 0.225 s (exactly 9 latents) from rounding up.
  return static_cast<int64_t>(std::ceil(seconds * 40.0 - 1e-9));
}

LatentShape latent_shape_for(int64_t width, int64_t height, int64_t frames, LatentShape cur) {
  check_pixels(width, height);
  if (width) cur.width = width / 16;
  if (height) cur.height = height / 16;
  if (frames) {
    cur.frames = latent_frames_for(frames);
    cur.audio = audio_latents_for(frames / 24.0);
  }
  return cur;
}

Request make_request(const H3Config& config, const RequestOptions& o) {
  const bool big = o.release_defaults;
  const int64_t frames = o.frames ? o.frames : (big ? 124 : 22);
  const int64_t width = o.width ? o.width : (big ? 1344 : 192);
  const int64_t height = o.height ? o.height : (big ? 768 : 128);
  check_pixels(width, height);
  H3RT_CHECK(o.audio_seconds >= 0 && std::isfinite(o.audio_seconds),
             "audio seconds must be a finite number >= 0 (0: the video's length), got ",
             o.audio_seconds);
  const double audio_seconds = o.audio_seconds > 0 ? o.audio_seconds : frames / 24.0;
  Request r;
  int64_t text_len = o.text_tokens ? o.text_tokens : (big ? 100 : 10);
  if (!o.text.empty()) {
    const int64_t n = static_cast<int64_t>(o.text.size());
    H3RT_CHECK(n % config.text_dim == 0, "text: ", n, " values are not rows of text_dim ",
               config.text_dim);
    text_len = n / config.text_dim;
    r.text = o.text;
  } else {
    H3RT_CHECK(text_len >= 1, "text tokens must be at least 1, got ", text_len);
    r.text = stand_in_text(o.seed, text_len, config);
  }
  r.layout = make_t2va_layout(text_len, audio_latents_for(audio_seconds), latent_frames_for(frames),
                              height / 16, width / 16);
  InitialNoise noise = initial_noise(o.seed, r.layout, config.in_channels, config.audio_channels);
  r.video_rows = std::move(noise.video_rows);
  r.audio_rows = std::move(noise.audio_rows);
  return r;
}

FloatVec text_embeddings_from_file(const std::string& path, const H3Config& config,
                                   int64_t* length) {
  return text_embeddings_from_file(SafetensorsFile::open(path), config, length);
}

FloatVec text_embeddings_from_file(const SafetensorsFile& f, const H3Config& config,
                                   int64_t* length) {
  Tensor t = text_tensor(f, config);
  *length = t.size(-2);
  H3RT_CHECK(*length >= 1, f.path(), ": text embeddings have no tokens");
  return to_floatvec(t);
}

Request request_from_inputs(const std::string& path, const H3Config& config) {
  return request_from_inputs(SafetensorsFile::open(path), config);
}

Request request_from_inputs(const SafetensorsFile& f, const H3Config& config) {
  const std::string& path = f.path();
  Tensor text = text_tensor(f, config);
  Tensor video = f.get("input/video_latents");
  H3RT_CHECK(video.dtype() == DType::f32 && video.dim() == 5 && video.size(0) == 1 &&
                 video.size(1) == config.in_channels && video.size(3) % 2 == 0 &&
                 video.size(4) % 2 == 0,
             path, ": tensor 'input/video_latents' is ", dtype_name(video.dtype()), " ",
             shape_str(video.shape()), ", expected f32 [1, ", config.in_channels,
             ", T, Hl, Wl] with even Hl and Wl");
  Tensor audio = f.get("input/audio_latents");
  H3RT_CHECK(audio.dtype() == DType::f32 && audio.dim() == 3 && audio.size(0) == 2 &&
                 audio.size(1) == config.audio_channels,
             path, ": tensor 'input/audio_latents' is ", dtype_name(audio.dtype()), " ",
             shape_str(audio.shape()), ", expected f32 [2, ", config.audio_channels, ", N]");
  Request r;
  const int64_t T = video.size(2), Hl = video.size(3), Wl = video.size(4), N = audio.size(2);
  r.layout = make_t2va_layout(text.size(-2), N, T, Hl, Wl);
  std::vector<float> v = video.to_f32(), a = audio.to_f32();
  r.video_rows = patchify_video(v.data(), config.in_channels, T, Hl, Wl);
  r.audio_rows = audio_latents_to_rows(a.data(), config.audio_channels, N);
  r.text = to_floatvec(text);
  bool conditioned = false;
  Conditioning c = conditioning_from_inputs(path, config, &conditioned);
  if (conditioned) condition_request(r, config, std::move(c));
  return r;
}

void condition_request_from_file(Request& r, const H3Config& config, const std::string& path,
                                 uint64_t seed) {
  bool found = false;
  Conditioning k = conditioning_from_inputs(path, config, &found, seed);
  H3RT_CHECK(found, path, ": --conditioning holds no keyframe/<i>/..., ref/<i>/..., ",
             "input/text_token_tags or denoise mask");
  condition_request(r, config, std::move(k));
}

}  // namespace h3rt
