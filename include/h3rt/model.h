// The MiniMax H3 transformer: configuration, weights and the CPU reference forward pass.
// The forward follows ../shared/golden/h3_tiny/README.md (sections 5-6) exactly; it is the
// oracle the CUDA kernels are tested against, written for clarity rather than speed.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "h3rt/hybrid.h"
#include "h3rt/layout.h"
#include "h3rt/memory.h"
#include "h3rt/safetensors.h"
#include "h3rt/sparse.h"
#include "h3rt/tensor.h"

namespace h3rt {

// ---- configuration ----------------------------------------------------------------------
struct H3Config {
  int64_t hidden = 192;         // H (not heads*head_dim)
  int64_t heads = 2;            // nh
  int64_t head_dim = 128;       // hd
  int64_t layers = 2;           // transformer blocks
  int64_t refiner_layers = 1;   // token-refiner blocks
  int64_t ffn = 384;            // F (SwiGLU width)
  int64_t text_dim = 64;        // text encoder width
  int64_t in_channels = 24;     // video latent channels (patch (1,2,2): 4*24 = 96 features)
  int64_t audio_channels = 32;  // audio latent channels
  int64_t freq_dim = 256;       // timestep sinusoid width
  int64_t time_embed_hidden = 192;
  int64_t time_embed_dim = 96;
  int64_t rope_freqs = 16;  // frequencies per rotary axis (t, h, w): 96 rotated channels
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;  // norm1/norm2
  float qk_norm_eps = 1e-5f;
  float final_norm_eps = 1e-5f;  // token_refiner.final_norm and final_layer.norm
  // Curve-form ("pruned") AdaLN, ComfyUI's adaln_t_table: 0 = the full form (time_embedder,
  // silu, [18H, time_embed_dim] AdaLN linears). > 0: grid rows of the f32 table
  // adaln_t_table [grid, rank] replace the time embedder; the AdaLN linears are [*, rank] and
  // run in float32 on the interpolated table row, without silu.
  int64_t adaln_curve_grid = 0;
  int64_t adaln_curve_rank = 0;
  // PDD head bank: final_layer.video_out/audio_out hold pdd_heads row blocks (head 0 full,
  // heads 1.. offsets); 1 = plain heads. A bank needs the sampler's schedule (SigmaSchedule).
  int64_t pdd_heads = 1;

  int64_t inner() const { return heads * head_dim; }          // I
  int64_t video_features() const { return in_channels * 4; }  // P = 96
  int64_t rope_dim() const { return 6 * rope_freqs; }         // R = 96
  bool adaln_curve() const { return adaln_curve_grid > 0; }
  int64_t adaln_in() const { return adaln_curve() ? adaln_curve_rank : time_embed_dim; }

  static H3Config tiny();  // the golden tiny set's dimensions
  static H3Config h3();    // the release: 5376 hidden, 50 blocks, 56 heads, ffn 14336
  void validate() const;   // throws on inconsistent dimensions
};

std::optional<H3Config> config_preset(const std::string& name);  // "tiny" / "h3"

enum class Precision { fp32, bf16 };
const char* precision_name(Precision p);

// ---- weights ----------------------------------------------------------------------------
// How a linear layer's weight is stored in its checkpoint, detected per layer (see
// model/weights.h). The quantized formats follow ComfyUI's conventions:
//   fp8_scaled: weight e4m3 [out, in], weight_scale f32 scalar; W = e4m3(w) * weight_scale.
//   nvfp4: weight u8 [out, in/2] (two e2m1 codes per byte, even element in the high nibble),
//     weight_scale e4m3 [roundup(out,128), roundup(in/16,4)] (cuBLAS 128x4 tiled),
//     weight_scale_2 f32 scalar g_w; W = e2m1(code) * e4m3(scale) * g_w (include/h3rt/nvfp4.h).
// Both may carry input_scale, an f32 scalar static activation scale.
//   int8: ComfyUI int8_tensorwise, W8A8 (include/h3rt/int8.h): weight i8 [out, in], weight_scale
//     f32 [out, 1] (or [], [1], [out]); with "convrot" (int8_group > 0) the stored weight is
//     already rotated per group of int8_group input columns, and each call rotates and
//     quantizes the activation per row. W = H(q * s) in the original basis.
enum class WeightFormat { f32, bf16, fp8_scaled, nvfp4, int8 };
const char* weight_format_name(WeightFormat f);

// A linear layer y = x W^T + b, W [out, in]. `data`/`scale`/`scale_2`/`input_scale`/`bias_data`
// keep the tensors as stored (views into the mapped file, or owned), for device upload; `w`/`b`
// are the exact float32 values the CPU reference computes with (bf16 upcast without change,
// quantized weights dequantized exactly as above).
struct LinearWeight {
  std::string name;  // layer key prefix, e.g. "blocks.0.attn.qkv_proj"
  WeightFormat format = WeightFormat::f32;
  int64_t out = 0, in = 0;
  Tensor data;         // as stored: [out, in], or u8 [out, in/2] for nvfp4
  Tensor scale;        // weight_scale: f32 scalar (fp8_scaled), e4m3 block scales (nvfp4),
                       // f32 per-row or scalar (int8)
  Tensor scale_2;      // weight_scale_2: f32 scalar global scale (nvfp4); else empty
  Tensor input_scale;  // f32 scalar static activation scale (quantized formats), or empty
  Tensor bias_data;    // [out] as stored, or empty
  // [out, in] f32 values: filled at load for f32/bf16/f16 layers (unless
  // LoadOptions::dense_float_copies is false). Quantized layers (fp8_scaled,
  // nvfp4, int8) leave it empty at load (dense copies of a 33B int8 checkpoint would need 77 GB of
  // host memory the GPU path never reads); dense_weight() fills it on first use.
  mutable FloatVec w;
  FloatVec b;  // [out] or empty
  // fp8_scaled without input_scale, opted in by set_fp8_activations(dynamic): the activation is
  // quantized to e4m3 with a scale computed per call (src/ops/fp8_quantize/fp8_quantize.h).
  bool fp8_dynamic_activations = false;
  // The marker's "full_precision_matrix_mult": true (Comfy-Org's scaled-fp8 convention): ComfyUI
  // multiplies in the compute dtype with the weight dequantized. An fp8 layer then runs dequantized
  // (its input_scale unused, never dynamic activations); int8 / nvfp4 layers still run quantized
  // (one warning line at load).
  bool full_precision = false;
  int64_t int8_group = 0;  // int8: the convrot group size G, 0 for plain tensorwise int8
  bool has_bias() const { return !b.empty(); }
  bool quantized() const {
    return format == WeightFormat::fp8_scaled || format == WeightFormat::nvfp4 ||
           format == WeightFormat::int8;
  }
};

// The layer's f32 weights [out, in]: lw.w, dequantized from data/scale on first use for
// quantized formats and kept (the CPU reference and layers the GPU runs densely need them).
// Not thread-safe on first use.
const FloatVec& dense_weight(const LinearWeight& lw);

struct AttentionWeights {
  LinearWeight qkv;         // [3I, H], rows [q; k; v] (fused thirds) after loading
  LinearWeight out;         // [H, I]
  FloatVec q_norm, k_norm;  // [hd]
};

struct MlpWeights {
  LinearWeight fc1;  // [2F, H], rows [gate; value]
  LinearWeight fc2;  // [H, F]
};

struct RefinerBlockWeights {
  FloatVec norm1, norm2;  // [H]
  AttentionWeights attn;
  MlpWeights mlp;
};

struct BlockWeights : RefinerBlockWeights {
  LinearWeight adaln;  // [18H, Tm] with bias; curve form: [18H, rank], f32 values
};

struct H3Weights {
  LinearWeight video_in, audio_in, text_in;  // patch projections and condition_proj
  LinearWeight time_in, time_out;            // time_embedder.proj_in / proj_out (full form)
  FloatVec adaln_t_table;                    // curve form: [grid, rank] (values as stored)
  FloatVec rope_inv_freq;                    // [rope_freqs]
  std::vector<RefinerBlockWeights> refiner;
  FloatVec refiner_norm;  // token_refiner.final_norm [H]
  std::vector<BlockWeights> blocks;
  FloatVec final_norm;                // final_layer.norm [H]
  LinearWeight final_adaln;           // [2H, Tm]: [shift; scale] (curve form: [2H, rank])
  LinearWeight video_out, audio_out;  // [n*96, H], [n*32, H], n = pdd_heads
};

struct H3Model {
  H3Config config;
  H3Weights weights;
};

// How fp8_scaled block projections (qkv, out, fc1, fc2 of the blocks and the refiner) WITHOUT a
// static input_scale compute. static_scale (the default, what ComfyUI computes for such a
// layer): the dequantized weight times the unquantized activation. dynamic (opt-in): the
// activation is quantized to e4m3 with s = amax|x| / 448 over the call's whole activation
// tensor (1 when amax is 0), and y = (x8 . W8^T) * (s * weight_scale) + b, as an fp8 GEMM does.
// Layers with an input_scale always use it. Returns the number of layers on the dynamic path.
enum class Fp8Activations { static_scale, dynamic };
int set_fp8_activations(H3Model& model, Fp8Activations mode);

// Row order of the fused qkv_proj weight in a file. fused_thirds: [q_all; k_all; v_all]
// (ComfyUI / original keys). per_head_interleaved: [q_0 k_0 v_0 q_1 ...] (raw MiniMaxAI
// shards). autodetect: the file's __metadata__ "qkv_layout" if present, else fused_thirds.
enum class QkvLayout { fused_thirds, per_head_interleaved, autodetect };

struct WeightFile {
  std::string path;
  QkvLayout qkv_layout = QkvLayout::autodetect;
};

struct LoadOptions {
  QkvLayout qkv_layout = QkvLayout::autodetect;  // of the main file
  // Later files replace entries of earlier ones (e.g. a file holding only the qkv tensors);
  // every key they hold must be a key of the model.
  std::vector<WeightFile> overrides;
  // Float layers (bf16, f16, f32) get their f32 values (LinearWeight::w) at load (true: the CPU
  // reference computes from them) or on first use of dense_weight (false: the CUDA backend
  // uploads the stored bf16 bytes, so host memory holds the mapped file, not twice its size in
  // f32: 132 GB for the 33B bf16 release).
  bool dense_float_copies = true;
};

// Infers the configuration from tensor shapes and key counts (heads = qkv rows / 3 / 128,
// layers = number of blocks.i, ...). Throws naming the file if a needed key is absent.
class SafetensorsFile;
H3Config infer_config(const SafetensorsFile& file);
// Same, from caller-owned tensors by name; `origin` names them in error messages.
H3Config infer_config(const std::map<std::string, Tensor>& tensors, const std::string& origin);

// Loads a checkpoint under the original / ComfyUI key names, validating every key: all missing,
// unexpected and mis-shaped keys are reported together in one h3rt::Error.
H3Model load_model(const std::string& path, const LoadOptions& options = {});
// Same, with the configuration given instead of inferred.
H3Model load_model(const std::string& path, const H3Config& config,
                   const LoadOptions& options = {});
// Same, from caller-owned host tensors by name (views: the caller keeps their memory alive for
// the model's lifetime); the config is inferred. `origin` names them in error messages;
// options.overrides must be empty, and autodetect reads as fused_thirds (there is no metadata).
H3Model load_model(const std::map<std::string, Tensor>& tensors, const LoadOptions& options = {},
                   const std::string& origin = "<tensors>");

// Deterministic synthetic weights (see synthetic.cpp for the hash), stored in the release's
// dtypes: a runnable model with no files.
H3Model make_synthetic_model(const H3Config& config, uint64_t seed);
// The same weights as checkpoint tensors under the release's key names and dtypes (what
// write_safetensors turns into a file that load_model reads back as make_synthetic_model).
NamedTensors synthetic_checkpoint(const H3Config& config, uint64_t seed);

struct WeightBytes {
  int64_t params = 0;        // number of parameters
  int64_t stored_bytes = 0;  // in the release's dtypes (f32 islands, bf16 elsewhere)
  int64_t cpu_bytes = 0;     // what the CPU reference holds: stored + a float32 copy
};
WeightBytes estimate_weight_bytes(const H3Config& config);

// ---- forward ----------------------------------------------------------------------------
// The sampler's schedule around one evaluation, as ComfyUI passes it (sigma, sample_sigmas):
// a PDD head bank picks its heads from it (model/pdd_head.h). Other checkpoints ignore it.
struct SigmaSchedule {
  float sigma = 0;                   // this evaluation's video sigma
  std::vector<float> sample_sigmas;  // the sampler's video sigma grid, terminal 0 included
  // The flow shifts (ComfyUI: transformer_options' minimax_h3_sigma_shift_video / _audio, Python
  // floats; the dt weights use them in float64, the span's base sigma in float32).
  double shift_video = 12.0, shift_audio = 3.0;
};

// A forward whose target rows and velocities are in CUDA device memory (the CUDA denoiser only;
// the CPU denoiser refuses it): float32, contiguous, on the current device. The work is ordered
// after `stream`'s prior work and before its later work (events, no device-wide sync); text and
// condition rows stay host arrays. The velocities are complete for work queued on `stream`
// after forward() returns; forward() itself waits only for checks that need the host.
struct DeviceIO {
  const float* video_rows = nullptr;  // [Nv, 96]
  const float* audio_rows = nullptr;  // [2N, 32]
  float* video_velocity = nullptr;    // [Nv, 96], written
  float* audio_velocity = nullptr;    // [2N, 32], written
  uintptr_t stream = 0;               // the caller's cudaStream_t (0: the legacy default stream)
};

struct ForwardInputs {
  const SequenceLayout& layout;
  const TimestepPlan& plan;
  const float* video_rows = nullptr;        // [Nv, 96]
  const float* audio_rows = nullptr;        // [2N, 32]
  const float* text = nullptr;              // [L, text_dim] (values of the bf16 encoder output)
  const SigmaSchedule* schedule = nullptr;  // required when config.pdd_heads > 1
  // Condition rows (conditioning.h condition_rows) at layout.cond_video_indices [Ncv, 96] and
  // layout.cond_audio_indices [Nca, 32]; the network embeds them like target rows and returns
  // no velocity for them. Null when the layout has none.
  const float* cond_video_rows = nullptr;
  const float* cond_audio_rows = nullptr;
  int step = -1;  // the sampling loop's step (0-based; -1: a forward outside one), for checks
  // Block-sparse attention for this forward (h3rt/sparse.h; null or !enabled(): dense), and
  // where to add what it computed (optional).
  const SparseAttention* sparse = nullptr;
  SparseStats* sparse_stats = nullptr;
  // The run's sparse check (h3rt/hybrid.h; optional, read only with `sparse`): its dense heads
  // route every key block, and when checking() the forward measures the sampled tiles and
  // records what it found (SparseCheck::record).
  SparseCheck* sparse_check = nullptr;
  // First-block step caching (h3rt/hybrid.h; null or !enabled(): every block runs). The
  // sampling loop owns it; the forward reads and refreshes its state and records its decision.
  StepCache* step_cache = nullptr;
  // Rows and velocities in device memory (video_rows/audio_rows above then stay null, and the
  // returned ForwardOutputs is empty); null: host rows in, host velocities out.
  const DeviceIO* device = nullptr;
  // The next forward's plan timesteps (its TimestepPlan::timestep), when the caller knows them:
  // the CUDA forward computes their time embedding on the host while this forward's device work
  // runs, instead of before the next one's (a full-form AdaLN's time MLP, ~5-7 ms). The next
  // forward's result is the same either way; the CPU forward ignores it. Optional.
  const std::vector<float>* next_timesteps = nullptr;
};

struct ForwardOutputs {
  FloatVec video_velocity;  // [Nv, 96], data-ward: x0 = x_t + sigma * v
  FloatVec audio_velocity;  // [2N, 32]
};

// Observes intermediates by the golden set's names ("time_sinusoid", "temb", "video_embeds",
// "audio_embeds", "text_proj", "text_refined", "packed_input", "adaln_indices" (as floats),
// "rope_cos", "rope_sin", "block<i>/{adaln,norm1_out,q_norm,k_norm,q_rope,k_rope,attn_out,
// norm2_out,ff_out}", "block<i>_out", "final_norm_out"). Shapes have no batch axis; adaln is
// [6, 3M, H] and q/k tensors are [S, heads, hd]. `data` is contiguous and valid for the call.
using Probe = std::function<void(const std::string& name, const float* data, const Shape& shape)>;

ForwardOutputs forward_cpu(const H3Model& model, const ForwardInputs& inputs, Precision precision,
                           const Probe* probe = nullptr);

// ---- finite checks (--check-finite) -------------------------------------------------------
// Thrown when a weight, an input or a stage's output holds NaN or Inf; the message names it.
class NonFinite : public Error {
 public:
  using Error::Error;
};

// Scans every float value the model computes with (each tensor's dequantized values, biases,
// norms, tables) and throws NonFinite naming the first tensor holding NaN or Inf (its checkpoint
// key), the element and the value. One pass over the host copy (memory-bound).
void check_weights_finite(const H3Model& model);

// Throws NonFinite unless x [rows, cols] is finite: "<what> holds <value> at row r, column c".
void check_rows_finite(const float* x, int64_t rows, int64_t cols, const std::string& what);

// A Probe for forward_cpu that throws NonFinite at the first stage output holding NaN or Inf:
// the packed input rows, the token refiner's output, each block's output, the final norm. The
// message names the stage (block i as "blocks.<i>"), the packed row (text, audio or video row
// of `layout`) and the column.
Probe finite_probe(const SequenceLayout& layout);
// What packed row r of `layout` is: "row r (text token i)", "(audio row i)", "(video row i)".
std::string packed_row_name(const SequenceLayout& layout, int64_t r);

}  // namespace h3rt
