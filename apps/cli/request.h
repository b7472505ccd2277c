// What `sample` and `forward` share: choosing the model (preset or checkpoint) and building a
// request's shapes, noise and text embeddings from options or from an inputs file.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "h3rt/layout.h"
#include "h3rt/model.h"

namespace h3rt::cli {

struct ModelOptions {
  std::string preset;      // "tiny" / "h3"; empty: tiny unless a checkpoint is given
  std::string checkpoint;  // a .safetensors file
  std::string qkv_layout = "auto";
  std::string qkv_override;  // a file holding only the qkv tensors, loaded over the checkpoint
  uint64_t weights_seed = 0;
  std::string precision;       // empty: fp32 on the CPU, bf16 on CUDA
  std::string device = "cpu";  // cpu or cuda

  void add_to(CLI::App* cmd, bool with_preset);
  Precision parsed_precision() const;
  std::string precision_name() const;
  // The model, refusing up front what the CPU reference cannot hold.
  H3Model load() const;
  std::string describe() const;
};

// Video pixel frames -> latent frames: latent frame f covers P[f mod 5] pixel frames with
// P = (1, 4, 4, 4, 4), so valid counts are 1, 5, 9, 13, 17, 18, 22, ... Throws otherwise,
// naming the nearest valid counts.
int64_t latent_frames_for(int64_t video_frames);
int64_t video_frames_for(int64_t latent_frames);
// Audio latents per channel at 40 per second, rounded up.
int64_t audio_latents_for(double seconds);

// The latents of a video of `width` x `height` pixels and `frames` frames (0: keep the value
// already held), its audio at frames / 24 s: the bench verbs' --width/--height/--frames.
struct LatentShape {
  int64_t frames, height, width, audio;  // latent frames, latent rows/columns, audio latents
};
LatentShape latent_shape_for(int64_t width, int64_t height, int64_t frames, LatentShape current);

// A request: its layout plus the starting rows and text embeddings.
struct Request {
  SequenceLayout layout;
  FloatVec video_rows;  // [Nv, 96]: noise (sample) or latents (forward)
  FloatVec audio_rows;  // [2N, 32]
  FloatVec text;        // [L, text_dim]
};

// Reads `input/text_embeds`, `input/video_latents` [1,24,T,Hl,Wl] and `input/audio_latents`
// [2,32,N] from an inputs file, checking shapes against the config.
Request request_from_inputs(const std::string& path, const H3Config& config);
// Reads text embeddings [1, L, text_dim] or [L, text_dim] (tensor `text_embeds` or
// `input/text_embeds`, bf16 or f32).
FloatVec text_embeddings_from_file(const std::string& path, const H3Config& config,
                                   int64_t* length);

}  // namespace h3rt::cli
