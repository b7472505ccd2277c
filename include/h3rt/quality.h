// Quality gates on latents: how far a test run's latents (B) are from a reference run's (A),
// e.g. an approximate (sparse / step-cached) trajectory against the dense one. `h3rt compare`
// and `h3rt sample --gate` print and write these figures.
//
// Definitions (A the reference, B the test, over the values named):
//   relative L2  ||B - A||_2 / ||A||_2          (0 when both are zero, +inf when only A is)
//   cosine       <A, B> / (||A||_2 ||B||_2)     (1 when both are zero, 0 when exactly one is)
//   PSNR         10 log10(R^2 / MSE) dB, MSE = mean (B - A)^2; +inf when A == B
//   data range R max(A) - min(A) over the whole video tensor of A (1 when A is constant), used
//                for every frame and the overall figures so that frames are comparable
//   SSIM         per latent frame t and channel c, on the plane [Hl, Wl]: every window of
//                h x w = min(7, Hl) x min(7, Wl) values at every valid position (stride 1, no
//                padding), uniform weights; per window means mu_a, mu_b, sample variances and
//                covariance (divided by N - 1, N = h w; by 1 when N = 1),
//                  ((2 mu_a mu_b + C1)(2 s_ab + C2)) / ((mu_a^2 + mu_b^2 + C1)(s_a^2 + s_b^2 + C2))
//                with C1 = (0.01 R)^2, C2 = (0.03 R)^2 (the usual constants of Wang et al.);
//                a frame's SSIM is the mean over its channels and windows, the overall SSIM the
//                mean of the frames'. Latents are not pixels: these figures compare runs, they
//                do not rate images.
//   Pearson      cov(A, B) / (sd(A) sd(B)) over all audio values (1 when A == B, 0 when either
//                is constant and they differ)
// Sums are accumulated in float64.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "h3rt/pipeline.h"
#include "h3rt/tensor.h"

namespace h3rt {

struct Similarity {
  double rel_l2 = 0, cosine = 1, psnr_db = 0, ssim = 1;
};

struct VideoComparison {
  Shape shape;                     // [1, C, T, Hl, Wl] as in the file ([C, T, Hl, Wl] also read)
  double data_range = 1;           // R above
  std::vector<Similarity> frames;  // per latent frame
  Similarity overall;
};

struct AudioComparison {
  Shape shape;  // [2, Ca, N]
  double pearson = 1, rel_l2 = 0;
};

struct LatentComparison {
  std::string file_a, file_b;  // reference, test
  std::optional<VideoComparison> video;
  std::optional<AudioComparison> audio;
};

// B against A; both of `shape` ([C, T, Hl, Wl], optionally with a leading 1).
VideoComparison compare_video(const float* a, const float* b, const Shape& shape);
AudioComparison compare_audio(const float* a, const float* b, const Shape& shape);

// The latents of two files as `h3rt sample` writes them: `video_latents` [1, 24, T, Hl, Wl] and
// `audio_latents` [2, 32, N], f32 (or bf16/f16). Each tensor is compared when both files hold
// it; one file holding a tensor the other lacks, a shape mismatch (naming both files, the
// tensor and both shapes) or neither tensor in either file is an error.
LatentComparison compare_latent_files(const std::string& a, const std::string& b);

// The gate of an approximate run: the same request sampled twice on one denoiser, dense
// (sparse attention and step caching off) and with `approx`'s hybrid settings, and the
// approximate latents compared with the dense ones (file_a/file_b left empty). At least one
// approximation must be on; resume files are refused (both runs start from the noise).
struct GateResult {
  SampleResult dense, approx;
  double dense_seconds = 0, approx_seconds = 0;  // wall time of each sample() call
  LatentComparison comparison;
};
GateResult sample_gate(Denoiser& denoiser, const Request& request, const SampleOptions& approx);

// The sample report's "hybrid" section: the settings and per step "attention" (sparse|dense),
// "sparse_fraction" (null unless the forward reported key blocks), "step_cache"
// (computed|reused|off) and "relative_l1" (block 0's residual change; null without a cached
// step); plus counts.
nlohmann::json hybrid_report(const SampleOptions& o, const SampleResult& r);
// The sample report's "gate" section: the seconds of both runs, the speedup dense/approx, the
// comparison (to_json) and where the latents were written (`files`: dense, approx, comparison).
nlohmann::json gate_report(const GateResult& g, const nlohmann::json& files);

// JSON: {"reference", "test", "video": {"shape", "data_range", "overall": {...}, "frames":
// [{...}]}, "audio": {"shape", "pearson", "relative_l2"}}; an infinite PSNR is written as null.
nlohmann::json to_json(const LatentComparison& c);
// A readable table: one row per latent frame, the overall row, then the audio figures.
std::string format_latent_comparison(const LatentComparison& c);

}  // namespace h3rt
