// The runtime as a library: a loaded model on a device (Denoiser), the requests it runs (shapes,
// seeded noise, text) and the sampling loop. The CLI, the C API (h3rt/h3rt.h) and the Python
// package are thin layers over this header; they give the same bits for the same request.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "h3rt/conditioning.h"
#include "h3rt/hybrid.h"
#include "h3rt/layout.h"
#include "h3rt/lora.h"
#include "h3rt/model.h"
#include "h3rt/report.h"
#include "h3rt/sampler.h"
#include "h3rt/tensor.h"

namespace h3rt {

// ---- a model on a device ------------------------------------------------------------------
enum class Attention { bf16, sage };  // sage: 8-bit SageAttention2 numerics, CUDA only

// NaN/Inf checks (NonFinite, h3rt/model.h, names what holds them): the inputs and every stage's
// output (packed input, token refiner, each block, final norm, velocities) of the first forward
// (first_step: step 0 of a sampling run and a denoiser's first forward), of every forward
// (every_step, which also scans the weights once when the denoiser is created), or none.
enum class CheckFinite { off, first_step, every_step };

// The block GEMM format of a preset's synthetic weights on CUDA, quantized on the device as
// `h3rt bench step --gemm` runs them: bf16 (as generated), fp8 (e4m3, static per-tensor
// scales, as fp8_scaled with an input_scale), int8 (W8A8 as ComfyUI's int8_convrot) or nvfp4
// (W4A4, static input scales). A checkpoint's layers run in the formats the file stores.
enum class SyntheticGemm { bf16, fp8, int8, nvfp4 };

// Where streamed block weights come from (DenoiserOptions::weight_stream_source):
//   pinned: a page-locked host copy of every block, copied to the device at full PCIe speed;
//     needs the streamed bytes (19.4 GB for the pruned int8 release) in free host memory.
//   file: each block read, as it is needed, from where the loaded weights already are (the
//     memory-mapped checkpoint, or the caller's host tensors) into one of two pinned staging
//     buffers, then copied; host memory holds no copy of the model (the file's pages are the
//     kernel's page cache, dropped under pressure), so a step may wait on the disk; the file
//     must not be written in place while the model runs (a forward then refuses, naming it; a
//     rename over it is safe). Layers the upload converts (e.g. fp8 without an input scale,
//     run as bf16) or that LoRAs were merged into are held as host copies.
//   automatic: pinned when every block's pinned copy fits the host's available memory with a
//     margin (MemAvailable, less 10% of the total and 2 GB), else file.
enum class WeightStreamSource { automatic, pinned, file };
const char* weight_stream_source_name(WeightStreamSource s);  // "auto", "pinned", "file"
// "auto" | "pinned" | "file"; throws naming `what` and the accepted values otherwise.
WeightStreamSource parse_weight_stream_source(const std::string& s,
                                              const char* what = "weight_stream_source");

// DenoiserOptions::device_memory_limit "auto" (parse_memory_size): resolved by create().
constexpr int64_t kDeviceMemoryAuto = -1;
// The limit "auto" gives a GPU with `free_bytes` free of `total_bytes`: free less a reserve of
// max(1.5 GiB, 5% of total) for what the plan does not count (CUDA context, library workspaces,
// graph memory, fragmentation); at least 1 byte.
int64_t auto_device_memory_limit(int64_t free_bytes, int64_t total_bytes);
// kDeviceMemoryAuto resolved on the current GPU (auto_device_memory_limit of its memory now, the
// caller's device tensors that the model will use in place counted as free: the plan counts them
// as the model's); other values as given. Throws for auto without a CUDA device.
int64_t resolve_device_memory_limit(int64_t limit, int64_t in_place_bytes = 0);

struct DenoiserOptions {
  Device device = Device::cpu;
  std::optional<Precision> precision;     // default: fp32 on the CPU, bf16 on CUDA (its only one)
  Attention attention = Attention::bf16;  // the blocks' attention kernel
  bool cuda_graphs = true;                // CUDA: replay warm steps from CUDA graphs (same bits)
  // fp8_scaled block projections without an input_scale (set_fp8_activations).
  Fp8Activations fp8_activations = Fp8Activations::static_scale;
  // LoRAs merged into the weights once, after loading, in this order (h3rt/lora.h); pairs that
  // do not fit the model are an error unless lora_skip_unmatched (then a warning each).
  std::vector<LoraSpec> loras;
  bool lora_skip_unmatched = false;
  CheckFinite check_finite = CheckFinite::first_step;
  // CUDA: the device bytes (weights + a forward's activations) to stay within; 0 = no limit;
  // kDeviceMemoryAuto: the GPU's free memory at create() less a reserve (auto_device_memory_limit;
  // on the CPU it means no limit).
  // Where the resident model and a request's activations exceed it, the weight matrices of as
  // many transformer blocks as it needs (spread over the model; the rest stay resident, and so do
  // blocks of the caller's CUDA tensors) stream from host memory (weight_stream_source) into two
  // device slots, each block's copy overlapped with the compute of the blocks before it (same
  // bits as resident). When the resident model cannot fit the limit at all, those blocks go to
  // host memory as they load, never onto the device. Below what streaming needs, create() or
  // forward() throws naming this option and the bytes needed.
  int64_t device_memory_limit = 0;
  // CUDA: called as the transformer blocks are placed (uploaded, or written to host memory
  // when they stream): (0, n) first, then (i + 1, n) after block i. Reading a 20-66 GB file
  // from disk takes tens of seconds; front ends show it.
  std::function<void(int done, int total)> load_progress;
  // Where streamed blocks are read from (see WeightStreamSource); only with a limit.
  WeightStreamSource weight_stream_source = WeightStreamSource::automatic;
  // A preset on device cuda only (an error with a checkpoint or on the CPU): its block GEMMs.
  SyntheticGemm synthetic_gemm = SyntheticGemm::bf16;
  // synthetic_gemm int8: the convrot group size (0: plain int8; -1: synthetic_int8_group's).
  int int8_group = -1;
};

// Whether and how a CUDA denoiser streams its block weights (Denoiser::weight_streaming).
struct WeightStreaming {
  int64_t limit = 0;        // device_memory_limit (0: none), resolved when set to auto
  bool limit_auto = false;  // the limit came from "auto" (the GPU's free memory at create())
  bool streamed = false;  // the block weights stream from host memory into device slots
  std::string source;     // streamed: "pinned" or "file" (WeightStreamSource)
  int64_t streamed_blocks = 0;  // how many of the transformer blocks stream (the rest resident)
  int slots = 0;                // device slots of one block's weights
  int64_t slot_bytes = 0;
  int64_t host_bytes = 0;  // pinned host bytes: each streamed block's copy (pinned) or staging
  int64_t h2d_bytes_per_step = 0;      // copied host -> device per forward
  int64_t resident_weight_bytes = 0;   // weights kept on the device
  int64_t planned_device_bytes = 0;    // the plan's estimate: weights + slots + activations
  bool streamed_at_load = false;       // the blocks went to host memory as they loaded
  int64_t load_peak_device_bytes = 0;  // the load's peak device bytes (the arena's, reserved)
  int64_t caller_device_bytes = 0;     // block weights used in place from the caller's GPU
};
nlohmann::json to_json(const WeightStreaming& w);  // the reports' "weight_streaming"

// Where the weights come from: a checkpoint file (memory-mapped) or a preset's synthetic weights.
struct ModelSource {
  std::string checkpoint;       // .safetensors, original/ComfyUI keys; empty: the preset
  std::string preset = "tiny";  // tiny | h3 (release dimensions), when checkpoint is empty
  uint64_t weights_seed = 0;    // of the preset's synthetic weights
  QkvLayout qkv_layout = QkvLayout::autodetect;
  std::string qkv_override;      // a file of qkv_proj tensors loaded over the checkpoint's
  std::string describe() const;  // the path, or "tiny (synthetic, seed 0)"
};

// A model loaded where it runs. forward() computes the data-ward velocities of one evaluation
// from host rows; the CUDA denoiser keeps a forward session per request shape (per-request work
// done once, warm steps replayed as CUDA graphs), rebuilt when the shape changes. Not
// thread-safe: one caller at a time.
class Denoiser {
 public:
  static std::unique_ptr<Denoiser> create(const ModelSource& source,
                                          const DenoiserOptions& options = {});
  // From caller-owned host tensors by name (a state dict; views, not copies where the dtype is
  // used as stored: the caller keeps their memory alive for the Denoiser's lifetime). The CUDA
  // denoiser uploads them. Device-memory views are not supported yet (a follow-up).
  static std::unique_ptr<Denoiser> create(const std::map<std::string, Tensor>& tensors,
                                          const DenoiserOptions& options = {},
                                          QkvLayout qkv_layout = QkvLayout::fused_thirds);
  virtual ~Denoiser() = default;

  virtual const H3Config& config() const = 0;
  virtual ForwardOutputs forward(const ForwardInputs& inputs) = 0;
  virtual std::string device_name() const = 0;  // "cpu", or the GPU's name and sm
  virtual Precision precision() const = 0;
  // Whether forward() takes rows and velocities in device memory (ForwardInputs::device).
  virtual bool device_rows() const { return false; }
  // Peak device bytes (allocated, reserved) of the caching arena; zeros on the CPU.
  virtual std::pair<int64_t, int64_t> device_peak_bytes() const { return {0, 0}; }
  // The weight streaming plan of the latest forward's shape (DenoiserOptions::device_memory_limit);
  // not streamed on the CPU and before the first forward without a limit. The load's fields
  // (streamed_at_load, load_peak_device_bytes, caller_device_bytes) are set from creation on;
  // a model streamed at load reports the smallest request's plan until its first forward.
  virtual WeightStreaming weight_streaming() const { return {}; }
  // Layers that fp8_activations dynamic switched to per-call scales (0: the option changed
  // nothing, e.g. a bf16 checkpoint).
  int fp8_dynamic_layers() const { return fp8_dynamic_layers_; }
  // What DenoiserOptions::loras changed: pairs and layers merged, a warning per skipped pair.
  const LoraMergeReport& lora_report() const { return lora_report_; }

 protected:
  int fp8_dynamic_layers_ = 0;
  LoraMergeReport lora_report_;
  CheckFinite check_finite_ = CheckFinite::first_step;
  int64_t forwards_ = 0;  // forwards begun (first_step checks the denoiser's first one)
  // One forward under the check_finite policy: run(check) computes it, checking its stages when
  // `check`; the inputs and velocities of a checked forward are checked here, and a NonFinite
  // error gets the step ("step 3: ...") in front.
  ForwardOutputs run_checked(const ForwardInputs& inputs,
                             const std::function<ForwardOutputs(bool check)>& run);
};

// The video and audio flow shifts of one evaluation (ComfyUI's MiniMaxH3SigmaShift node sets
// them; 12 and 3 by default): they map the video sigma to the audio timestep and weight the heads
// of a PDD bank. Both must be finite and > 0 (checked where they are used, naming them).
struct FlowShifts {
  double video = kVideoShift, audio = kAudioShift;
};
void check_flow_shifts(const FlowShifts& shifts);

// One forward of a t2va layout at video sigma, as `h3rt forward` computes it: t_video = 1 - sigma,
// t_audio = 1 - audio_sigma_from_video(sigma, shifts) (12 -> 3 by default). sample_sigmas: the
// sampler's video grid, what a PDD head bank picks its heads from (empty: no schedule; a bank
// refuses).
ForwardOutputs forward_at_sigma(Denoiser& denoiser, const SequenceLayout& layout,
                                const float* video_rows, const float* audio_rows, const float* text,
                                float sigma, const std::vector<float>& sample_sigmas = {},
                                const FlowShifts& shifts = {});

// Option words as the CLI, the C API and Python spell them; throw naming `what` otherwise.
Device parse_device(const std::string& s, const char* what = "device");
Precision parse_precision(const std::string& s, const char* what = "precision");
Attention parse_attention(const std::string& s, const char* what = "attention");
Fp8Activations parse_fp8_activations(const std::string& s, const char* what = "fp8_activations");
CheckFinite parse_check_finite(const std::string& s,
                               const char* what = "check_finite");  // off|first|all
// A size in bytes: "2.5e10" (bytes), "24GB" (10^9), "24GiB" (2^30), also B, KB, MB, TB, KiB,
// MiB, TiB (units case-insensitive); "0" is 0 (no limit); "auto" is kDeviceMemoryAuto.
int64_t parse_memory_size(const std::string& s, const char* what = "device_memory_limit");
SyntheticGemm parse_synthetic_gemm(const std::string& s, const char* what = "gemm");
const char* synthetic_gemm_name(SyntheticGemm g);  // bf16|fp8|int8|nvfp4
// The convrot group of synthetic_gemm int8: `requested` when >= 0, else the largest of 256, 64
// and 16 that divides every block projection's input size (256 for h3, 64 for tiny).
int synthetic_int8_group(const H3Config& config, int requested);

// ---- requests -----------------------------------------------------------------------------
// One request: its layout plus the starting rows and text embeddings, and optionally conditioning
// (keyframes, references, text tags, denoise masks; set by condition_request).
struct Request {
  SequenceLayout layout;
  FloatVec video_rows;  // [Nv, 96]: noise (sample) or latents (forward); target rows only
  FloatVec audio_rows;  // [2N, 32]
  FloatVec text;        // [L, text_dim]
  Conditioning conditioning;
  ConditionRows cond;  // the condition rows after augmentation (fixed for the whole run)
  // ComfyUI's semantics: layout = make_layout (its PackedLayout), timesteps as its _forward
  // computes them. False: the t2va reference (diffusers) layout and timesteps, as before.
  bool comfy = false;
};

// Gives `r` conditioning (an empty one is plain t2va in ComfyUI's semantics): the layout is
// rebuilt once from the signature (layout_spec) and the condition rows computed once.
void condition_request(Request& r, const H3Config& config, Conditioning c);

// One evaluation of a request at video sigma. Without comfy: forward_at_sigma (unchanged bits).
// With comfy: comfy_eval_times(sigma), make_conditioned_plan with the request's augmentation
// and masks, the condition rows, then the outputs multiplied by the masks. audio_scale != 1:
// the request's audio rows are the sampler's carried variable (AudioCarry), converted in and out.
struct EvalOptions {
  std::vector<float> sample_sigmas;  // the sampler's video grid, for PDD head banks
  float audio_scale = 1.0f;
  FlowShifts shifts;  // the audio timestep, the audio carry and PDD head weights follow them
  // false: the network's output as ComfyUI's _forward returns it (negated), before forward()'s
  // mask multiply; the masks still set the per-row timesteps.
  bool mask_outputs = true;
  // Target rows and velocities in device memory (h3rt/model.h DeviceIO; the request's own rows
  // are then unused). Refused with audio_scale != 1 or with masks to multiply (host steps).
  const DeviceIO* device = nullptr;
};
ForwardOutputs forward_request(Denoiser& denoiser, const Request& request, float sigma,
                               const EvalOptions& options = {});

// forward_request on ComfyUI-layout latents in CUDA device memory: video [1, C, T, H, W] and
// audio [1, Ca, 2, N] (f32 or bf16, any strides) patchified into new stream-ordered rows on
// `stream` (h3rt/device.h: video_rows_view, comfy_audio_rows_view), the forward on those rows
// (options.device is set here), and the velocities unpatchified into out_video / out_audio (the
// same layouts; f32 or bf16). Nothing waits for the GPU unless the forward does (its finite
// checks). The Python package's forward of CUDA latents; `h3rt bench step --device-io` times it.
void forward_device_latents(Denoiser& denoiser, const Request& request, float sigma,
                            const Tensor& video, const Tensor& audio, const Tensor& out_video,
                            const Tensor& out_audio, uintptr_t stream, EvalOptions options = {});

// A request from sizes as a user gives them (pixels, video frames, seconds; 0 = the default) and
// a seed: the starting noise (initial_noise), and seeded stand-in text embeddings (stream 2,
// rounded to bf16) unless `text` is given.
struct RequestOptions {
  int64_t width = 0, height = 0, frames = 0;  // default 192 x 128, 22 frames
  double audio_seconds = 0;                   // default frames / 24
  int64_t text_tokens = 0;                    // stand-in text length, default 10
  bool release_defaults = false;              // defaults 1344 x 768, 124 frames, 100 tokens
  uint64_t seed = 440420;
  FloatVec text;  // [L, text_dim] text encoder output; empty: the stand-in
};
Request make_request(const H3Config& config, const RequestOptions& options);

// Reads `input/text_embeds`, `input/video_latents` [1,24,T,Hl,Wl] and `input/audio_latents`
// [2,32,N] from an inputs file, checking shapes against the config, and the conditioning it holds
// (conditioning_from_inputs; a file with any is a comfy request).
Request request_from_inputs(const std::string& path, const H3Config& config);

// The conditioning tensors and metadata of an inputs file (README "Inputs files"): keyframe/<i>/
// {video,audio,video_noise,audio_noise} and metadata keyframe/<i>/frame_index; ref/<i>/{video,
// audio,video_noise,audio_noise} and metadata ref/<i>/kind (image|video|audio); input/
// text_token_tags [L]; input/video_denoise_mask [T,Hl,Wl]; input/audio_denoise_mask [2,N];
// metadata visual_cond_noise_aug, audio_cond_noise_aug, cond_seed (default `default_seed`).
// `found` tells whether any was present.
Conditioning conditioning_from_inputs(const std::string& path, const H3Config& config, bool* found,
                                      uint64_t default_seed = 0);
// Gives r the conditioning of a conditioning file (conditioning_from_inputs with the request's
// seed as the default cond_seed); a file holding none is an error naming it and what it lacks.
void condition_request_from_file(Request& r, const H3Config& config, const std::string& path,
                                 uint64_t seed);
Request request_from_inputs(const SafetensorsFile& file, const H3Config& config);
// Text embeddings [1, L, text_dim] or [L, text_dim] (tensor `text_embeds` or
// `input/text_embeds`, bf16 or f32) from a file; *length = L.
FloatVec text_embeddings_from_file(const std::string& path, const H3Config& config,
                                   int64_t* length);
FloatVec text_embeddings_from_file(const SafetensorsFile& file, const H3Config& config,
                                   int64_t* length);

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

// ---- the sampling loop --------------------------------------------------------------------
// Called once before the first step (step 0, seconds 0) and after every step with the steps
// done, the total and the seconds since the loop began. Returning false cancels the run (after
// the last step nothing is left to cancel: the run completes).
using ProgressFn = std::function<bool(int step, int steps, double seconds)>;

struct SampleOptions {
  int steps = 8;  // model evaluations (the sigma grid has steps + 1 points), in [1, 1000]
  double video_shift = kVideoShift, audio_shift = kAudioShift;
  // diffusers (default, the reference stack's Euler with each stream on its own grid; sampler
  // euler only) or simple (ComfyUI's schedule and loop: euler, res_multistep, euler_ancestral).
  Scheduler scheduler = Scheduler::diffusers;
  SamplerKind sampler = SamplerKind::euler;
  uint64_t noise_seed = 440420;               // euler_ancestral's per-step noise (ancestral_noise)
  ProgressFn progress;                        // optional
  const std::atomic<bool>* cancel = nullptr;  // optional; set to cancel, checked per step
  // Resumable runs. With checkpoint_path set, the loop state (latents, steps done, the
  // sampler's state) and the request it belongs to are written there atomically every
  // checkpoint_every steps (0: never) and when the run is cancelled. resume_path continues from
  // such a file; one from another model or request is refused with the differences named.
  std::string checkpoint_path, resume_path;
  int checkpoint_every = 0;
  // Recorded in resume files and checked on resume (model_identity(): the weights' identity);
  // empty: a description of the config only.
  std::string model_identity;
  // The hybrid (h3rt/hybrid.h; both off by default): sparse attention from step dense_steps
  // on, and first-block step caching with a cache owned by this run (a resumed run starts
  // with an empty cache).
  HybridOptions hybrid;
  StepCacheOptions step_cache;
  // With a denoiser that takes device rows (Denoiser::device_rows: the CUDA one), keep the
  // loop's state in device memory and run the sampler updates there: nothing crosses to the host
  // between steps (the result is bit-identical either way). Runs with denoise masks keep their
  // state on the host. false: always on the host.
  bool device_loop = true;
};

struct SampleResult {
  FloatVec video_latents;  // [1, C, T, Hl, Wl]
  FloatVec audio_latents;  // [2, Ca, N]
  Shape video_shape, audio_shape;
  std::vector<StageSeconds> stages;      // one per step run here (output_transform on the last)
  int resumed_steps = 0;                 // steps restored from resume_path (0: a fresh run)
  std::vector<float> video_sigmas;       // the schedule the run used, terminal 0 included
  std::vector<HybridStep> hybrid_steps;  // one per step run here: sparse or dense, cache use
  bool device_loop = false;              // the state stayed in device memory (device_loop)
};

// The identity a resume file records for a model: for a checkpoint a hash of its safetensors
// header and size (and of the qkv override's), for a preset its name and weights seed; plus the
// options that change the bits (precision, attention, fp8 activations).
std::string model_identity(const ModelSource& source, const DenoiserOptions& options);

// Thrown by sample() when the progress callback or the cancel flag stops it (at a step
// boundary, after writing checkpoint_path when one is set; the message names it).
class Cancelled : public Error {
 public:
  using Error::Error;
};

// The denoising loop from the request's rows: options.scheduler's schedule and sampler, each
// step's SigmaSchedule passed on (for PDD head banks); same bits as `h3rt sample` for the same
// request and options.
SampleResult sample(Denoiser& denoiser, Request request, const SampleOptions& options = {});

}  // namespace h3rt
