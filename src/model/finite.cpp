// --check-finite on the host: the weight scan, row checks and the forward_cpu probe (model.h).
#include <string>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "h3rt/model.h"
#include "ops/finite_check/finite_check.h"

namespace h3rt {
namespace {

// First non-finite index of x[0, n), split over threads for large tensors (-1: none).
int64_t first_bad(const float* x, int64_t n) {
  const int64_t threads = threads_for_work(static_cast<double>(n));
  if (threads <= 1) return ops::first_non_finite_cpu(x, n);
  std::vector<int64_t> found(static_cast<size_t>(threads), -1);
  const int64_t chunk = (n + threads - 1) / threads;
  parallel_ranges(threads, threads, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t lo = t * chunk, len = std::min(n, lo + chunk) - lo;
      const int64_t i = len > 0 ? ops::first_non_finite_cpu(x + lo, len) : -1;
      found[static_cast<size_t>(t)] = i < 0 ? -1 : lo + i;
    }
  });
  for (int64_t i : found)
    if (i >= 0) return i;
  return -1;
}

std::string value_name(float v) {
  return v != v ? "NaN" : (v > 0 ? "+Inf" : "-Inf");
}

class WeightScan {
 public:
  void vec(const FloatVec& v, const std::string& key, int64_t cols) {
    const int64_t i = first_bad(v.data(), static_cast<int64_t>(v.size()));
    if (i < 0) return;
    std::string where =
        cols > 0 ? detail::concat("[", i / cols, ", ", i % cols, "]") : detail::concat("[", i, "]");
    throw NonFinite(detail::concat("weight '", key, "' holds ", value_name(v[i]), " at ", where,
                                   " (checked with --check-finite all)"));
  }
  void linear(const LinearWeight& l) {
    if (l.name.empty()) return;  // a layer the config does not have (e.g. curve-form AdaLN)
    if (l.quantized()) {
      // No dense copy is made (77 GB for the release int8 file): int8 and e2m1 codes are finite
      // by construction, so the scales carry what can go bad (host tensors; fp8 e4m3 NaN codes
      // are not scanned).
      for (const auto& [t, key] :
           {std::pair{&l.scale, ".weight_scale"}, std::pair{&l.scale_2, ".weight_scale_2"},
            std::pair{&l.input_scale, ".input_scale"}})
        if (t->data() && t->device() == Device::cpu && t->dtype() == DType::f32) {
          const std::vector<float> v = t->to_f32();
          vec(FloatVec(v.begin(), v.end()), l.name + key, 0);
        }
    } else if (!l.w.empty() || l.data.device() != Device::cpu) {
      vec(l.w, l.name + ".weight", l.in);
    } else {  // loaded without dense copies: one layer's f32 values at a time
      const std::vector<float> v = l.data.to_f32();
      vec(FloatVec(v.begin(), v.end()), l.name + ".weight", l.in);
    }
    vec(l.b, l.name + ".bias", 0);
  }
  void core(const RefinerBlockWeights& b, const std::string& p) {
    vec(b.norm1, p + "norm1.weight", 0);
    vec(b.norm2, p + "norm2.weight", 0);
    linear(b.attn.qkv);
    linear(b.attn.out);
    vec(b.attn.q_norm, p + "attn.q_norm.weight", 0);
    vec(b.attn.k_norm, p + "attn.k_norm.weight", 0);
    linear(b.mlp.fc1);
    linear(b.mlp.fc2);
  }
};

}  // namespace

void check_weights_finite(const H3Model& m) {
  const H3Weights& w = m.weights;
  WeightScan s;
  for (const LinearWeight* l : {&w.video_in, &w.audio_in, &w.text_in, &w.time_in, &w.time_out})
    s.linear(*l);
  s.vec(w.adaln_t_table, "adaln_t_table", m.config.adaln_curve_rank);
  s.vec(w.rope_inv_freq, "rope.inv_freq", 0);
  for (size_t i = 0; i < w.refiner.size(); ++i)
    s.core(w.refiner[i], "token_refiner.blocks." + std::to_string(i) + ".");
  s.vec(w.refiner_norm, "token_refiner.final_norm.weight", 0);
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    s.core(w.blocks[i], "blocks." + std::to_string(i) + ".");
    s.linear(w.blocks[i].adaln);
  }
  s.vec(w.final_norm, "final_layer.norm.weight", 0);
  for (const LinearWeight* l : {&w.final_adaln, &w.video_out, &w.audio_out}) s.linear(*l);
}

void check_rows_finite(const float* x, int64_t rows, int64_t cols, const std::string& what) {
  const int64_t i = x ? first_bad(x, rows * cols) : -1;
  if (i < 0) return;
  throw NonFinite(detail::concat(what, " holds ", value_name(x[i]), " at row ", i / cols,
                                 ", column ", i % cols));
}

std::string packed_row_name(const SequenceLayout& L, int64_t r) {
  auto find = [r](const std::vector<int64_t>& idx) -> int64_t {
    for (size_t i = 0; i < idx.size(); ++i)
      if (idx[i] == r) return static_cast<int64_t>(i);
    return -1;
  };
  std::string kind;
  int64_t i = -1;
  if ((i = find(L.text_indices)) >= 0)
    kind = "text token";
  else if ((i = find(L.audio_indices)) >= 0)
    kind = "audio row";
  else if ((i = find(L.video_indices)) >= 0)
    kind = "video row";
  return kind.empty() ? detail::concat("row ", r)
                      : detail::concat("row ", r, " (", kind, " ", i, ")");
}

Probe finite_probe(const SequenceLayout& layout) {
  return [&layout](const std::string& name, const float* data, const Shape& shape) {
    std::string stage;
    if (name == "packed_input")
      stage = "the packed input rows (patch projections and condition_proj)";
    else if (name == "text_refined")
      stage = "the token refiner's output (token_refiner.*)";
    else if (name == "final_norm_out")
      stage = "the final layer's norm (final_layer.norm)";
    else if (name.rfind("block", 0) == 0 && name.size() > 9 &&
             name.compare(name.size() - 4, 4, "_out") == 0 && name.find('/') == std::string::npos)
      stage = "the output of block " + name.substr(5, name.size() - 9) + " (blocks." +
              name.substr(5, name.size() - 9) + ".*)";
    else
      return;
    const int64_t cols = shape.back(), rows = shape_numel(shape) / cols;
    const int64_t i = first_bad(data, rows * cols);
    if (i < 0) return;
    const int64_t row = i / cols;
    const std::string row_name =
        name == "text_refined" ? detail::concat("text token ", row) : packed_row_name(layout, row);
    throw NonFinite(detail::concat(stage, " holds ", value_name(data[i]), " at ", row_name,
                                   ", column ", i % cols));
  };
}

}  // namespace h3rt
