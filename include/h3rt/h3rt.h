/* h3rt's C API: a MiniMax H3 model on a device, one forward on host float32 buffers, and the
 * sampling loop. A thin layer over the C++ API (h3rt/pipeline.h): the same bits for the same
 * inputs. Every call returns an h3rt_status; on failure h3rt_last_error() holds the message
 * (per thread, valid until the thread's next failing call). No C++ exception crosses it.
 * Link: the static library is C++, so a consumer links with a C++ linker (CMake:
 * find_package(h3rt) and `project(x C CXX)`, target h3rt::h3rt). */
#ifndef H3RT_H3RT_H
#define H3RT_H3RT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change of this header, and on additions. */
#define H3RT_API_VERSION 7

typedef enum h3rt_status {
  H3RT_OK = 0,
  H3RT_ERROR_INVALID_ARGUMENT = 1, /* a null pointer, a bad option word or size */
  H3RT_ERROR_RUNTIME = 2,          /* h3rt::Error: bad file, shape, unsupported case, ... */
  H3RT_ERROR_CANCELLED = 3,        /* the progress callback returned 0 */
  H3RT_ERROR_OUT_OF_MEMORY = 4
} h3rt_status;

const char* h3rt_version(void); /* the library's version, "0.1.0" */
int h3rt_api_version(void);     /* H3RT_API_VERSION of the library linked */
const char* h3rt_last_error(void);

typedef struct h3rt_model h3rt_model;

/* Called as a CUDA model's n transformer blocks are placed: (0, n) first, then (i + 1, n) after
 * block i (reading a 20-66 GB checkpoint takes tens of seconds). Not called on the CPU. */
typedef void (*h3rt_load_progress_fn)(int done, int total, void* user);

/* NULL strings take the default. */
typedef struct h3rt_model_options {
  const char* device;               /* "cpu" (default) or "cuda" */
  const char* precision;            /* "fp32" or "bf16"; default fp32 on cpu, bf16 on cuda */
  const char* attention;            /* "bf16" (default) or "sage" (cuda only) */
  int cuda_graphs;                  /* nonzero (default): replay warm steps from CUDA graphs */
  const char* fp8_activations;      /* "static" (default) or "dynamic" */
  const char* check_finite;         /* NaN/Inf checks: "first" (default: the first forward), "all"
                                       (every forward, and the weights once) or "off" */
  const char* device_memory_limit;  /* cuda: device bytes for weights + activations, "24GB",
                                       "24GiB", "2.5e10" or "auto" (the GPU's free memory at
                                       create less a reserve, API version 5); NULL or "0"
                                       (default): no limit.
                                       Above it the weights of as many blocks as it needs
                                       stream from host memory */
  const char* weight_stream_source; /* where they stream from: "auto" (default), "pinned" (a
                                       page-locked copy of every block) or "file" (read from the
                                       mapped checkpoint as needed) */
  /* API version 5. LoRA files (ComfyUI key forms, e.g. the release's turbo LoRA) merged into the
     weights once at load, in this order, as `h3rt sample --lora F:S`: num_loras paths, each at
     lora_strengths[i] (NULL: 1.0 each). A pair that does not fit the model is an error naming
     it, unless lora_skip_unmatched is nonzero: then it is skipped and listed by
     h3rt_model_lora_report. */
  const char* const* lora_paths;
  const double* lora_strengths;
  int num_loras;
  int lora_skip_unmatched;
  h3rt_load_progress_fn load_progress; /* may be NULL */
  void* load_progress_user;
} h3rt_model_options;
void h3rt_model_options_init(h3rt_model_options* options);

/* A checkpoint (.safetensors, original/ComfyUI keys, memory-mapped); options may be NULL. */
h3rt_status h3rt_model_create(const char* checkpoint_path, const h3rt_model_options* options,
                              h3rt_model** out);
/* A preset's synthetic weights: "tiny" or "h3". */
h3rt_status h3rt_model_create_preset(const char* preset, uint64_t weights_seed,
                                     const h3rt_model_options* options, h3rt_model** out);
void h3rt_model_free(h3rt_model* model); /* NULL is fine */

typedef struct h3rt_config {
  int64_t hidden, heads, head_dim, layers, refiner_layers, ffn, text_dim;
  int64_t in_channels, audio_channels, video_features, freq_dim, time_embed_dim;
  int64_t pdd_heads;                          /* > 1: a PDD head bank (needs sample_sigmas) */
  int64_t adaln_curve_grid, adaln_curve_rank; /* > 0: curve-form (pruned) AdaLN */
} h3rt_config;
h3rt_status h3rt_model_config(const h3rt_model* model, h3rt_config* out);
/* What the options' LoRAs changed (API version 5): pairs merged, layers changed, and the skipped
 * pairs, one line each ("" when none; valid until the model is freed). Any pointer may be NULL. */
h3rt_status h3rt_model_lora_report(const h3rt_model* model, int* pairs, int* layers,
                                   const char** skipped);
/* How options.device_memory_limit placed the transformer blocks' weights (API version 6), as of
 * the latest forward (before one: the load's plan). All zero without a limit and on the CPU. */
typedef struct h3rt_weight_streaming {
  int64_t device_memory_limit; /* bytes, "auto" resolved at create; 0: none */
  int limit_auto;              /* 1: the limit came from "auto" */
  int streamed;                /* 1: some blocks' weights stream from host memory each step */
  int streamed_at_load;        /* 1: they went to host memory as they loaded */
  int slots;                   /* device slots of one block's weights */
  int64_t streamed_blocks;     /* how many blocks stream (as few as the limit needs) */
  int64_t slot_bytes, host_bytes, h2d_bytes_per_step, resident_weight_bytes;
  int64_t planned_device_bytes;   /* the plan's estimate: resident weights + slots + activations */
  int64_t load_peak_device_bytes; /* the load's peak in h3rt's device pool */
  const char* source;             /* "pinned", "file", or "" when nothing streams (static) */
} h3rt_weight_streaming;
h3rt_status h3rt_model_weight_streaming(const h3rt_model* model, h3rt_weight_streaming* out);

/* The packed [text | audio | video] layout of one request (batch 1). Sizes are latent sizes:
 * 2 * audio_len audio rows, frames * (height/2) * (width/2) video rows, S = text_len + both.
 * Each NULL array takes its t2va value (make_t2va_layout). */
typedef struct h3rt_layout {
  int64_t text_len, audio_len, frames, height, width;
  const int64_t* text_indices;  /* [text_len] */
  const int64_t* audio_indices; /* [2 * audio_len] */
  const int64_t* video_indices; /* [video rows] */
  const int32_t* token_tags;    /* [S]: video 0, text 1, audio 2 */
  const double* position_ids;   /* [S, 3] (t, h, w) */
} h3rt_layout;

/* Per-row timesteps: the distinct values ascending, and each row's index into them. */
typedef struct h3rt_timesteps {
  const float* timestep;           /* [num_timesteps] */
  int64_t num_timesteps;           /* M */
  const int64_t* timestep_indices; /* [S] */
  /* The sampler's schedule (PDD head banks only; num_sample_sigmas 0: none). */
  float sigma;
  const float* sample_sigmas;
  int64_t num_sample_sigmas;
} h3rt_timesteps;

/* One forward on host float32 rows: video [Nv, 96], audio [2N, 32], text [L, text_dim]; writes
 * the data-ward velocities (x0 = x + sigma v) into video_velocity [Nv, 96] and
 * audio_velocity [2N, 32]. A layout without audio rows (audio_len 0) runs on text and video
 * alone; audio_rows and audio_velocity may then be NULL (so in the two calls below). */
h3rt_status h3rt_forward(h3rt_model* model, const h3rt_layout* layout,
                         const h3rt_timesteps* timesteps, const float* video_rows,
                         const float* audio_rows, const float* text, float* video_velocity,
                         float* audio_velocity);
/* h3rt_forward on rows and velocities in CUDA device memory (a CUDA model): the same shapes,
 * float32, contiguous, on the model's device; `text` stays a host array. `stream` is the caller's
 * cudaStream_t (NULL: the legacy default stream): h3rt's work runs after the stream's earlier
 * work and before its later work (events, no device-wide sync), and the call returns without
 * waiting for the GPU, except where finite checks read the host (check_finite "first" waits on
 * the model's first forward). Not with a CPU model (H3RT_ERROR_RUNTIME names the device). */
h3rt_status h3rt_forward_device(h3rt_model* model, const h3rt_layout* layout,
                                const h3rt_timesteps* timesteps, const float* video_rows,
                                const float* audio_rows, const float* text, float* video_velocity,
                                float* audio_velocity, void* stream);
/* The same on the t2va layout at video sigma, as `h3rt forward`: t_video = 1 - sigma, the audio
 * timestep from the audio shift (12 -> 3). */
h3rt_status h3rt_forward_t2va(h3rt_model* model, int64_t text_len, int64_t audio_len,
                              int64_t frames, int64_t height, int64_t width, float sigma,
                              const float* video_rows, const float* audio_rows, const float* text,
                              float* video_velocity, float* audio_velocity);
/* h3rt_forward_t2va at other flow shifts (API version 5; ComfyUI's MiniMaxH3SigmaShift node,
 * `h3rt forward --shift / --audio-shift`): the audio timestep, and a PDD bank's head weights,
 * follow video_shift and audio_shift (> 0; 12 and 3 give h3rt_forward_t2va's bits). */
h3rt_status h3rt_forward_t2va_shifted(h3rt_model* model, int64_t text_len, int64_t audio_len,
                                      int64_t frames, int64_t height, int64_t width, float sigma,
                                      double video_shift, double audio_shift,
                                      const float* video_rows, const float* audio_rows,
                                      const float* text, float* video_velocity,
                                      float* audio_velocity);

/* Returns 0 to cancel. Called before the first step (step 0) and after each step. */
typedef int (*h3rt_progress_fn)(int step, int steps, double seconds, void* user);

typedef struct h3rt_sample_request {
  int64_t width, height, frames; /* pixels and video frames; 0: 192 x 128, 22 frames */
  double audio_seconds;          /* 0: frames / 24 */
  int64_t text_tokens;           /* stand-in text length; 0: 10 */
  uint64_t seed;                 /* 440420: the starting noise, condition noise, euler_ancestral's
                                    noise and sparse-check draws, as `h3rt sample --seed` */
  int steps;                     /* model evaluations, default 8 */
  const float* text;             /* [text_len, text_dim] embeddings, or NULL: seeded stand-in */
  int64_t text_len;
  h3rt_progress_fn progress; /* may be NULL */
  void* progress_user;
  /* A conditioning file (first/last-frame keyframes, references, text tags, denoise masks and
     the clean latents they keep), the format of `h3rt sample --conditioning` (README "Inputs
     files"), or NULL: plain t2va. Denoise masks need scheduler "simple". */
  const char* conditioning;
  /* The hybrid (h3rt/hybrid.h, `h3rt sample --sparse-attention ...`; off by default): block-sparse
     attention at router threshold sparse_attention (> 0; CUDA with Sage attention) from step
     dense_steps on, in blocks from dense_blocks on; first-block step caching at relative-L1
     threshold step_cache (> 0), at most step_cache_max reused steps in a row. */
  float sparse_attention; /* 0 */
  int dense_steps;        /* 10 */
  int dense_blocks;       /* 2 */
  double step_cache;      /* 0 */
  int step_cache_max;     /* 3 */
  /* `h3rt sample --sampler / --scheduler` (API version 2): NULL for euler / diffusers. */
  const char* sampler;   /* euler | res_multistep | euler_ancestral */
  const char* scheduler; /* diffusers | simple */
  /* `h3rt sample --sparse-check K --sparse-check-bound X` (API version 3): with sparse
     attention, every K-th sparse step recomputes a seeded sample of query tiles densely and
     turns the (block, head) pairs whose relative L1 reaches the bound dense (h3rt/hybrid.h). */
  int sparse_check;          /* 0: off */
  double sparse_check_bound; /* 0.05 */
  /* API version 5. The sigma shifts, as `h3rt sample --shift / --audio-shift` (> 0; 0: 12 and
     3). Resumable runs, as `h3rt sample --checkpoint-file / --checkpoint-every / --resume`: the
     loop state is written to checkpoint_file every checkpoint_every steps (0: never) and when the
     progress callback cancels; resume continues from such a file (one from another model or
     request is refused, naming the difference). checkpoint_file NULL: resume's path, else none
     (checkpoint_every must then be 0, and a cancel writes nothing). Files are left in place. */
  double video_shift, audio_shift;
  const char* checkpoint_file;
  int checkpoint_every;
  const char* resume;
} h3rt_sample_request;
void h3rt_sample_request_init(h3rt_sample_request* request);

/* The output shapes of a request: video [1, C, T, Hl, Wl], audio [2, Ca, N]. */
h3rt_status h3rt_sample_shapes(const h3rt_model* model, const h3rt_sample_request* request,
                               int64_t video_shape[5], int64_t audio_shape[3]);
/* The whole sampling loop, the same bits as `h3rt sample`; the capacities are in floats. */
h3rt_status h3rt_sample(h3rt_model* model, const h3rt_sample_request* request, float* video_latents,
                        int64_t video_capacity, float* audio_latents, int64_t audio_capacity);

/* API version 7. `h3rt selftest` (h3rt/selftest.h): the GPU kernels this build runs on the current
 * CUDA device against the CPU reference on fresh random data (seed 0: a fresh seed). *passed is 1
 * when every case that applies passed, else 0; *report_json (may be NULL) points to the report as
 * JSON, valid on this thread until its next h3rt_selftest call. H3RT_ERROR_RUNTIME without a CUDA
 * backend or device (a failed case is *passed = 0, not an error). */
h3rt_status h3rt_selftest(uint64_t seed, int* passed, const char** report_json);

#ifdef __cplusplus
}
#endif

#endif /* H3RT_H3RT_H */
