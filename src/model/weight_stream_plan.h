// Weight streaming for GPUs smaller than the model (DenoiserOptions::device_memory_limit): the
// plan, as pure arithmetic on a config and the formats the CUDA model stores its blocks in.
//
// Streamed: the weight matrices of the five linears (qkv, out, fc1, fc2 and the AdaLN projection)
// of the streamed transformer blocks, as few as the limit needs (WeightStreamPlan::blocks):
// bf16/f32 `w`, fp8 `w8`, int8 `wi8`, nvfp4 `w4` and its block scales. They live in host memory
// (pinned, one image per block laid out exactly as a device slot; or, source file, where the
// load found them, gathered into a pinned staging image per slot); the forward holds `slots`
// device slots of one image and copies the next streamed block into a free slot on a copy stream
// while the blocks before it compute (model/weight_stream_cuda.h). Resident: the other blocks,
// and everything else (biases, per-row and scalar scales, norms, the token refiner, patch
// projections, heads).
//
// Cost (h3: hidden 5376, inner 7168, ffn 14336): a block's four projections hold 385M weights,
// 0.385 GB in int8/fp8 and 0.77 GB in bf16; the full AdaLN [96768, 2688] adds 0.52 GB bf16 (the
// pruned curve form's f32 [96768, rank] is small). At ~50 GB/s of PCIe H2D the pruned int8 block
// copies in ~8 ms against ~19 ms of compute per block at 864x480, 124 frames (15,499 rows):
// hidden. There the pruned int8 model (20.3 GB) plus a step (~3.9 GB) just exceeds 24 GB;
// streamed it plans 5.6 GB on the device and 19.4 GB of H2D per step.
// With the full AdaLN (the synthetic `bench step --preset h3` model) an int8 block is 0.906 GB,
// ~18 ms per block: about its compute, so only just hidden; bf16 1.29 GB, ~26 ms, roughly its
// (slower) compute.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "h3rt/layout.h"
#include "h3rt/model.h"
#include "h3rt/pipeline.h"

namespace h3rt::model {

// How the CUDA model stores one linear (model_cuda.h, DeviceLinear).
enum class LinearStorage { bf16, f32, fp8, int8, nvfp4 };

// The storage of a block's projections and AdaLN (bf16, int8 as an unpruned int8 file stores it,
// or f32 for the curve form). The final AdaLN is stored as the blocks' AdaLN.
struct BlockStorage {
  LinearStorage qkv = LinearStorage::bf16, out = LinearStorage::bf16, fc1 = LinearStorage::bf16,
                fc2 = LinearStorage::bf16, adaln = LinearStorage::bf16;
  // A patch projection, condition_proj or output head runs int8: the forward then holds the
  // int8 activation buffers even where no projection is int8.
  bool int8_io = false;
  bool any(LinearStorage s) const { return qkv == s || out == s || fc1 == s || fc2 == s; }
  bool int8_activations() const { return any(LinearStorage::int8) || int8_io; }
};
// All four projections stored as `projections`; the AdaLN as the config's form computes it.
BlockStorage uniform_storage(const H3Config& c, LinearStorage projections);

// The row width of the int8 activation buffer (make_block_buffers): the widest input of an int8
// layer, a block projection's or one around the blocks (condition_proj's text_dim, a head's H).
int64_t int8_activation_width(const H3Config& c);

// One streamed tensor's place in a block's image (= its device slot).
struct SlotEntry {
  std::string name;  // "qkv.weight", "fc1.weight_scale" (nvfp4 block scales), ...
  int64_t offset = 0, bytes = 0;
};
struct SlotLayout {
  std::vector<SlotEntry> entries;
  int64_t bytes = 0;                                 // the slot's size (entries aligned)
  void add(const std::string& name, int64_t bytes);  // appends at the next 256-byte boundary
};
// The image of one transformer block stored as `s` (the order model/weight_stream_cuda.cu uses).
SlotLayout block_slot_layout(const H3Config& c, const BlockStorage& s);

// Device bytes of every weight of the model held resident, stored as `s` (blocks and refiner
// alike; the patch projections and heads float32, condition_proj bf16).
int64_t model_weight_bytes(const H3Config& c, const BlockStorage& s);
// The same with the refiner's projections stored as `refiner` (the refiner's AdaLN-free blocks:
// a synthetic model quantizes only the transformer blocks).
int64_t model_weight_bytes(const H3Config& c, const BlockStorage& blocks,
                           const BlockStorage& refiner);

// How the CUDA upload (model_cuda.cu) stores a host layer: a block projection (qkv, out, fc1,
// fc2) keeps nvfp4 and int8, and fp8_scaled with an input_scale or dynamic activations; anything
// else runs bf16 (dequantized). A block's AdaLN: f32 in the curve form, else int8 where the file
// stores it int8 (W8A8, streamed as int8 like the projections), else bf16.
LinearStorage upload_storage(const LinearWeight& projection);
BlockStorage upload_storage(const H3Config& c, const RefinerBlockWeights& b);
BlockStorage upload_storage(const H3Config& c, const BlockWeights& b);
// Whether any layer around the blocks (patch projections, condition_proj, heads) is int8.
bool int8_io_layers(const H3Weights& w);

// The rows a forward session holds activations for.
struct ForwardShape {
  int64_t rows = 0, text = 0, video = 0, audio = 0, cond_video = 0, cond_audio = 0;
};
ForwardShape forward_shape(const SequenceLayout& layout);

// Estimated device bytes of one forward session's activations and workspaces (the block
// buffers as make_block_buffers allocates them, the refiner's, staging and GEMM scratch), with
// a fixed margin for GEMM plans and allocator rounding. Not including the step cache's 12 bytes
// per element of the [rows, hidden] stream (allocated on the first cached step).
int64_t estimate_working_set_bytes(const H3Config& c, const BlockStorage& s, bool sage_attention,
                                   const ForwardShape& shape);
constexpr int64_t kWorkingSetMarginBytes = int64_t(256) << 20;

struct WeightStreamInput {
  int64_t limit = 0;              // DenoiserOptions::device_memory_limit; 0: unlimited
  int64_t weight_bytes = 0;       // every device weight, resident
  int64_t slot_bytes = 0;         // one block's image
  int64_t blocks = 0;             // transformer blocks
  int64_t working_set_bytes = 0;  // the forward's (estimate_working_set_bytes)
  int slots = 2;
  // Blocks that already stream, ascending (a model streams them from then on; a plan may add
  // more), and blocks that cannot (the caller's CUDA tensors, used in place).
  std::vector<int64_t> streamed, fixed;
};

struct WeightStreamPlan {
  bool stream = false;
  WeightStreamSource source = WeightStreamSource::pinned;  // pinned or file (with_source)
  // The streamed blocks, ascending: no more than the limit needs (each streamed block beyond the
  // slots saves its image on the device), spread evenly over the model so that every copy has
  // the resident blocks before it to overlap with; the others stay resident.
  std::vector<int64_t> blocks;
  int slots = 0;
  int64_t slot_bytes = 0;
  int64_t resident_weight_bytes = 0;  // weights kept on the device
  int64_t host_bytes = 0;             // pinned host memory: block images, or file's staging
  int64_t device_bytes = 0;           // resident weights + slots + working set
  int64_t h2d_bytes_per_step = 0;     // every block's image, once per forward
};

// Resident when there is no limit or everything fits it; else the fewest blocks stream that
// bring the device bytes within it (at least slots + 1: fewer would save nothing), those already
// streamed among them. Throws naming device_memory_limit, the bytes streaming needs and their
// parts when even streaming every block that can exceeds it.
WeightStreamPlan plan_weight_streaming(const WeightStreamInput& in);
// `count` of the blocks [0, n) outside `fixed`, `already` among them, the rest spread evenly
// over the gaps (ascending). Throws when fewer than `count` can stream.
std::vector<int64_t> spread_blocks(int64_t n, int64_t count, const std::vector<int64_t>& already,
                                   const std::vector<int64_t>& fixed);

// The host's memory as /proc/meminfo gives it (MemAvailable, MemTotal; sysconf's physical
// pages for both where that file cannot be read).
struct HostMemory {
  int64_t available = 0, total = 0;
};
HostMemory host_memory();

// Where a model's streamed blocks come from (h3rt/pipeline.h, WeightStreamSource): `requested`
// unless automatic; then pinned when `pinned_bytes` (every block's image) fits the available
// memory less a margin (10% of the total + 2 GB: what the process and the OS need besides), else
// file. Never automatic.
WeightStreamSource choose_stream_source(WeightStreamSource requested, int64_t pinned_bytes,
                                        const HostMemory& host);
// `p` reading from `s`: file pins only `slots` staging images instead of every block's.
WeightStreamPlan with_source(WeightStreamPlan p, WeightStreamSource s);

// The decision at load time, before any weight reaches the device: plan_weight_streaming for
// the smallest request (the working set of no rows: tables, cuBLAS workspace and the margin).
// `stream`: even that exceeds the limit, so the blocks go to host memory as they load
// (model/weight_stream_cuda.h, BlockImageWriter) and the device holds only the resident part;
// else the model loads resident, within the limit, and a request's plan may still move its
// blocks out at its first forward (apply_weight_streaming). Throws as plan_weight_streaming
// when even streaming cannot fit.
struct LoadPlan {
  bool stream = false;
  int64_t weight_bytes = 0;         // every weight, resident
  int64_t device_weight_bytes = 0;  // weights the load leaves on the device
  SlotLayout slot;                  // a block's image
  WeightStreamPlan plan;            // for the smallest request
};
// `fixed`: blocks that cannot stream (WeightStreamInput::fixed).
LoadPlan plan_load(const H3Config& c, const BlockStorage& blocks, const BlockStorage& refiner,
                   int64_t limit, bool sage_attention, const std::vector<int64_t>& fixed = {});

// The source of a load planned as `lp` (none: no limit): choose_stream_source with this host's
// memory now when it streams; pinned (no host side is written) otherwise.
WeightStreamSource load_stream_source(const std::optional<LoadPlan>& lp,
                                      WeightStreamSource requested);

// The plan as the Denoiser and the reports give it (h3rt/pipeline.h).
WeightStreaming weight_streaming_of(const WeightStreamPlan& p, int64_t limit);

}  // namespace h3rt::model
