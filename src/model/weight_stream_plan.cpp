#include "model/weight_stream_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "h3rt/check.h"
#include "h3rt/nvfp4.h"

namespace h3rt::model {
namespace {

constexpr int64_t kAlign = 256;  // cudaMalloc's alignment, kept for every tensor in a slot

int64_t align_up(int64_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

double gb(int64_t bytes) {
  return static_cast<double>(bytes) / 1e9;
}

// The weight matrix bytes of a linear [out, in] (nvfp4: the packed codes only).
int64_t matrix_bytes(LinearStorage s, int64_t out, int64_t in) {
  switch (s) {
    case LinearStorage::f32:
      return out * in * 4;
    case LinearStorage::bf16:
      return out * in * 2;
    case LinearStorage::fp8:
    case LinearStorage::int8:
      return out * in;
    case LinearStorage::nvfp4:
      return out * in / 2;
  }
  return 0;
}

// The small per-layer tensors that stay resident (scales; not the bias).
int64_t scale_bytes(LinearStorage s, int64_t out) {
  if (s == LinearStorage::fp8) return 2 * 4;     // weight and input scale
  if (s == LinearStorage::int8) return out * 4;  // per-row weight scale
  if (s == LinearStorage::nvfp4) return 2 * 4;   // weight_scale_2, input_scale
  return 0;
}

struct Shape2 {
  const char* name;
  LinearStorage s;
  int64_t out, in;
};

std::vector<Shape2> block_linears(const H3Config& c, const BlockStorage& s, bool adaln) {
  const int64_t H = c.hidden, I = c.inner(), F = c.ffn;
  std::vector<Shape2> v = {{"qkv", s.qkv, 3 * I, H},
                           {"out", s.out, H, I},
                           {"fc1", s.fc1, 2 * F, H},
                           {"fc2", s.fc2, H, F}};
  if (adaln) v.push_back({"adaln", s.adaln, 18 * H, c.adaln_in()});
  return v;
}

int64_t linear_bytes(const Shape2& l) {
  int64_t b = matrix_bytes(l.s, l.out, l.in) + scale_bytes(l.s, l.out);
  if (l.s == LinearStorage::nvfp4) b += nvfp4_scales_bytes(l.out, l.in);
  return b;
}

// Activation bytes of make_block_buffers at `rows` (block_cuda.cu), with the GEMM scratch of
// the formats present estimated from the kernels' sizing rules.
int64_t block_buffer_bytes(const H3Config& c, const BlockStorage& s, bool sage, int64_t rows) {
  const int64_t H = c.hidden, I = c.inner(), F = c.ffn, widest = std::max({H, I, F});
  int64_t b = rows * (3 * H + 3 * I + I + 2 * F + F) * 2;  // x n y, qkv, attn, h, g (bf16)
  b += 65536 * 2 + 6 * 6 * H * 2;                          // silu table, a 2-timestep table
  b += rows * 8 + 2 * rows * c.rope_dim() * 4;             // row index, cos, sin
  if (s.any(LinearStorage::fp8)) b += rows * widest;
  if (s.int8_activations()) {  // quantized rows, their scales, int32 accumulator chunks
    const int64_t out = std::max({3 * I, 2 * F, H});
    b += rows * int8_activation_width(c) + rows * 4 +
         std::min(rows * out * 4, (int64_t(256) << 20) + 128 * out * 4);
  }
  if (s.any(LinearStorage::nvfp4))  // packed rows and scales; dequantized operands (bf16)
    b += rows * widest / 2 + nvfp4_scales_bytes(rows, widest) + rows * widest * 2 + 2 * F * H * 2;
  if (sage) b += 3 * c.heads * ((rows + 255) / 256 * 256) * c.head_dim + (int64_t(8) << 20);
  return b;
}

}  // namespace

int64_t int8_activation_width(const H3Config& c) {
  return std::max({c.hidden, c.inner(), c.ffn, c.text_dim, c.video_features(), c.audio_channels});
}

BlockStorage uniform_storage(const H3Config& c, LinearStorage projections) {
  BlockStorage s;
  s.qkv = s.out = s.fc1 = s.fc2 = projections;
  s.adaln = c.adaln_curve() ? LinearStorage::f32 : LinearStorage::bf16;
  return s;
}

void SlotLayout::add(const std::string& name, int64_t n) {
  const int64_t offset = align_up(bytes);
  entries.push_back({name, offset, n});
  bytes = align_up(offset + n);
}

SlotLayout block_slot_layout(const H3Config& c, const BlockStorage& s) {
  SlotLayout l;
  for (const Shape2& x : block_linears(c, s, true)) {
    l.add(std::string(x.name) + ".weight", matrix_bytes(x.s, x.out, x.in));
    if (x.s == LinearStorage::nvfp4)
      l.add(std::string(x.name) + ".weight_scale", nvfp4_scales_bytes(x.out, x.in));
  }
  return l;
}

int64_t model_weight_bytes(const H3Config& c, const BlockStorage& s) {
  return model_weight_bytes(c, s, s);
}

int64_t model_weight_bytes(const H3Config& c, const BlockStorage& s, const BlockStorage& r) {
  const int64_t H = c.hidden;
  const int64_t norms = 2 * H * 2 + 2 * c.head_dim * 2;
  int64_t block = norms, refiner = norms;
  for (const Shape2& l : block_linears(c, s, true)) block += linear_bytes(l);
  for (const Shape2& l : block_linears(c, r, false)) refiner += linear_bytes(l);
  // The AdaLN biases: float32 in the curve form, else bf16 (int8 layers' too).
  const int64_t bias_elem = s.adaln == LinearStorage::f32 ? 4 : 2;
  block += 18 * H * bias_elem;
  int64_t rest = (c.video_features() + c.audio_channels + 2) * H * 4;  // patch projections
  rest += (H * c.text_dim + H) * 2;                                    // condition_proj
  // The final AdaLN, stored as the blocks' (an int8 file quantizes both).
  rest += linear_bytes({"final_adaln", s.adaln, 2 * H, c.adaln_in()}) + 2 * H * bias_elem;
  rest += (c.video_features() + c.audio_channels) * (H + 1) * 4;  // heads
  rest += 2 * H * 2;                                              // final norms
  return c.layers * block + c.refiner_layers * refiner + rest;
}

LinearStorage upload_storage(const LinearWeight& l) {
  if (l.format == WeightFormat::nvfp4) return LinearStorage::nvfp4;
  if (l.format == WeightFormat::int8) return LinearStorage::int8;
  if (l.format == WeightFormat::fp8_scaled && (l.input_scale.data() || l.fp8_dynamic_activations))
    return LinearStorage::fp8;
  return LinearStorage::bf16;
}

BlockStorage upload_storage(const H3Config& c, const RefinerBlockWeights& b) {
  BlockStorage s = uniform_storage(c, LinearStorage::bf16);
  s.qkv = upload_storage(b.attn.qkv);
  s.out = upload_storage(b.attn.out);
  s.fc1 = upload_storage(b.mlp.fc1);
  s.fc2 = upload_storage(b.mlp.fc2);
  return s;
}

BlockStorage upload_storage(const H3Config& c, const BlockWeights& b) {
  BlockStorage s = upload_storage(c, static_cast<const RefinerBlockWeights&>(b));
  if (!c.adaln_curve() && b.adaln.format == WeightFormat::int8) s.adaln = LinearStorage::int8;
  return s;
}

bool int8_io_layers(const H3Weights& w) {
  for (const LinearWeight* l : {&w.video_in, &w.audio_in, &w.text_in, &w.video_out, &w.audio_out})
    if (l->format == WeightFormat::int8) return true;
  return false;
}

ForwardShape forward_shape(const SequenceLayout& l) {
  ForwardShape s;
  s.rows = l.seq_len();
  s.text = l.text_len;
  s.video = l.video_rows();
  s.audio = l.audio_rows();
  s.cond_video = static_cast<int64_t>(l.cond_video_indices.size());
  s.cond_audio = static_cast<int64_t>(l.cond_audio_indices.size());
  return s;
}

int64_t estimate_working_set_bytes(const H3Config& c, const BlockStorage& s, bool sage,
                                   const ForwardShape& f) {
  const int64_t H = c.hidden, P = c.video_features(), A = c.audio_channels;
  int64_t b = block_buffer_bytes(c, s, sage, f.rows);
  if (f.text) b += block_buffer_bytes(c, s, false, f.text) + f.text * (c.text_dim + H) * 2;
  b += (f.cond_video + f.cond_audio) * H * 2 + f.rows * 8;  // condition rows, timestep index
  b += 2 * (f.video * P + f.audio * A) * 4;                 // patch inputs, velocities (f32)
  // sample()'s device loop (pipeline/device_loop.h): latent, network input, velocity and
  // previous denoised per stream, and one noise buffer.
  b += 4 * (f.video * P + f.audio * A) * 4 + std::max(f.video * P, f.audio * A) * 4;
  const int64_t scratch = std::max({f.video, f.audio, f.cond_video, f.cond_audio}) * H * 4;
  if (scratch > f.rows * 2 * c.ffn * 2) b += scratch;  // else the session borrows `h`
  b += int64_t(32) << 20;                              // cuBLAS workspace
  // int8 AdaLN (adaln_int8_cuda.h): a 2-timestep table's quantized rows, scales, int32 rows.
  if (s.adaln == LinearStorage::int8) b += 2 * c.adaln_in() + 2 * 4 + 2 * 18 * H * 4;
  return b + kWorkingSetMarginBytes;
}

std::vector<int64_t> spread_blocks(int64_t n, int64_t count, const std::vector<int64_t>& already,
                                   const std::vector<int64_t>& fixed) {
  std::vector<char> taken(static_cast<size_t>(n), 0);
  for (const std::vector<int64_t>* list : {&already, &fixed})
    for (int64_t i : *list) {
      H3RT_CHECK(i >= 0 && i < n, "weight streaming: block ", i, " out of range [0, ", n, ")");
      taken[static_cast<size_t>(i)] = 1;
    }
  std::vector<int64_t> open;
  for (int64_t i = 0; i < n; ++i)
    if (!taken[static_cast<size_t>(i)]) open.push_back(i);
  std::vector<int64_t> out = already;
  const int64_t more = count - static_cast<int64_t>(already.size());
  H3RT_CHECK(more <= static_cast<int64_t>(open.size()), "weight streaming: ", count,
             " blocks should stream, but only ", open.size() + already.size(), " of ", n, " can");
  const int64_t m = static_cast<int64_t>(open.size());
  for (int64_t j = 0; j < more; ++j)  // the middle of each of `more` equal gaps
    out.push_back(open[static_cast<size_t>((2 * j + 1) * m / (2 * more))]);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// The fewest blocks whose streaming brings `in` within its limit (those already streamed kept).
int64_t streamed_count(const WeightStreamInput& in) {
  const int64_t already = static_cast<int64_t>(in.streamed.size());
  const int64_t excess = in.weight_bytes + in.working_set_bytes - in.limit;
  if (in.limit == 0 || excess <= 0) return already;
  H3RT_CHECK(in.slot_bytes > 0, "weight streaming: the blocks hold no streamable weights");
  return std::max(already, in.slots + (excess + in.slot_bytes - 1) / in.slot_bytes);
}

}  // namespace

WeightStreamPlan plan_weight_streaming(const WeightStreamInput& in) {
  H3RT_CHECK(in.limit >= 0, "device_memory_limit must be >= 0 bytes (0: no limit), got ", in.limit);
  H3RT_CHECK(in.slots >= 2, "weight streaming needs >= 2 slots, got ", in.slots);
  WeightStreamPlan p;
  const int64_t count = streamed_count(in);
  if (count == 0) {
    p.resident_weight_bytes = in.weight_bytes;
    p.device_bytes = in.weight_bytes + in.working_set_bytes;
    return p;
  }
  const int64_t can = in.blocks - static_cast<int64_t>(in.fixed.size());
  const auto device_bytes = [&](int64_t k) {
    return std::max<int64_t>(0, in.weight_bytes - k * in.slot_bytes) + in.slots * in.slot_bytes +
           in.working_set_bytes;
  };
  if (count > can) {
    const int64_t least = device_bytes(can),
                  resident = least - in.slots * in.slot_bytes - in.working_set_bytes;
    const std::string fixed =
        in.fixed.empty() ? std::string()
                         : "; " + std::to_string(in.fixed.size()) +
                               " blocks are the caller's CUDA tensors, used in place, and cannot "
                               "stream (pass them as CPU tensors to let them)";
    H3RT_FAIL("device_memory_limit ", gb(in.limit), " GB (", in.limit,
              " bytes) is below what streaming the block weights needs: ", gb(least), " GB (",
              least, " bytes: ", gb(resident), " GB of resident weights + ", in.slots, " slots of ",
              gb(in.slot_bytes), " GB + ", gb(in.working_set_bytes),
              " GB of activations and workspaces for this shape", fixed,
              "); raise the limit or use a smaller shape");
  }
  p.stream = true;
  p.blocks = spread_blocks(in.blocks, count, in.streamed, in.fixed);
  p.slots = in.slots;
  p.slot_bytes = in.slot_bytes;
  p.resident_weight_bytes = std::max<int64_t>(0, in.weight_bytes - count * in.slot_bytes);
  p.host_bytes = count * in.slot_bytes;
  p.h2d_bytes_per_step = count * in.slot_bytes;
  p.device_bytes = device_bytes(count);
  return p;
}

HostMemory host_memory() {
  HostMemory h;
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char key[64];
    long long kb = 0;
    while (std::fscanf(f, "%63s %lld kB\n", key, &kb) == 2) {
      if (!std::strcmp(key, "MemAvailable:")) h.available = kb * 1024;
      if (!std::strcmp(key, "MemTotal:")) h.total = kb * 1024;
    }
    std::fclose(f);
  }
  const int64_t physical = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGE_SIZE));
  if (h.total <= 0) h.total = physical;
  if (h.available <= 0) h.available = h.total;
  return h;
}

WeightStreamSource choose_stream_source(WeightStreamSource requested, int64_t pinned_bytes,
                                        const HostMemory& host) {
  if (requested != WeightStreamSource::automatic) return requested;
  const int64_t margin = host.total / 10 + (int64_t(2) << 30);
  return pinned_bytes <= host.available - margin ? WeightStreamSource::pinned
                                                 : WeightStreamSource::file;
}

WeightStreamSource load_stream_source(const std::optional<LoadPlan>& lp,
                                      WeightStreamSource requested) {
  if (!lp || !lp->stream) return WeightStreamSource::pinned;
  return choose_stream_source(requested, lp->plan.host_bytes, host_memory());
}

WeightStreamPlan with_source(WeightStreamPlan p, WeightStreamSource s) {
  H3RT_CHECK(s != WeightStreamSource::automatic, "with_source: choose the source first");
  p.source = s;
  if (p.stream && s == WeightStreamSource::file) p.host_bytes = p.slots * p.slot_bytes;
  return p;
}

LoadPlan plan_load(const H3Config& c, const BlockStorage& blocks, const BlockStorage& refiner,
                   int64_t limit, bool sage, const std::vector<int64_t>& fixed) {
  LoadPlan l;
  l.weight_bytes = model_weight_bytes(c, blocks, refiner);
  l.slot = block_slot_layout(c, blocks);
  WeightStreamInput in;
  in.limit = limit;
  in.weight_bytes = l.weight_bytes;
  in.slot_bytes = l.slot.bytes;
  in.blocks = c.layers;
  in.working_set_bytes = estimate_working_set_bytes(c, blocks, sage, ForwardShape{});
  in.fixed = fixed;
  try {
    l.plan = plan_weight_streaming(in);
  } catch (const Error& e) {  // "this shape" is the smallest request here: say so
    H3RT_FAIL("loading the model: ", e.what(), " (the shape: a request of no rows)");
  }
  l.stream = l.plan.stream;
  l.device_weight_bytes = l.plan.resident_weight_bytes;
  return l;
}

WeightStreaming weight_streaming_of(const WeightStreamPlan& p, int64_t limit) {
  WeightStreaming w;
  w.limit = limit;
  w.streamed = p.stream;
  if (p.stream) w.source = weight_stream_source_name(p.source);
  w.streamed_blocks = static_cast<int64_t>(p.blocks.size());
  w.slots = p.slots;
  w.slot_bytes = p.slot_bytes;
  w.host_bytes = p.host_bytes;
  w.h2d_bytes_per_step = p.h2d_bytes_per_step;
  w.resident_weight_bytes = p.resident_weight_bytes;
  w.planned_device_bytes = p.device_bytes;
  return w;
}

}  // namespace h3rt::model

namespace h3rt {

nlohmann::json to_json(const WeightStreaming& w) {
  return {{"device_memory_limit", w.limit},
          {"device_memory_limit_auto", w.limit_auto},
          {"streamed", w.streamed},
          {"source", w.source},
          {"streamed_blocks", w.streamed_blocks},
          {"slots", w.slots},
          {"slot_bytes", w.slot_bytes},
          {"host_bytes", w.host_bytes},
          {"h2d_bytes_per_step", w.h2d_bytes_per_step},
          {"resident_weight_bytes", w.resident_weight_bytes},
          {"planned_device_bytes", w.planned_device_bytes},
          {"streamed_at_load", w.streamed_at_load},
          {"load_peak_device_bytes", w.load_peak_device_bytes},
          {"caller_device_bytes", w.caller_device_bytes}};
}

}  // namespace h3rt
