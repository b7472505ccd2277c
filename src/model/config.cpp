// H3Config presets, validation, and inference of the configuration from a checkpoint.
#include <map>
#include <set>
#include <string>

#include "h3rt/check.h"
#include "h3rt/model.h"
#include "h3rt/safetensors.h"

namespace h3rt {

H3Config H3Config::tiny() {
  return H3Config{};
}  // the defaults are the golden tiny set

H3Config H3Config::h3() {
  H3Config c;
  c.hidden = 5376;
  c.heads = 56;
  c.layers = 50;
  c.refiner_layers = 2;
  c.ffn = 14336;
  c.text_dim = 5120;
  c.time_embed_hidden = 5376;
  c.time_embed_dim = 2688;
  return c;
}

void H3Config::validate() const {
  H3RT_CHECK(hidden > 0 && heads > 0 && layers > 0 && refiner_layers >= 0 && ffn > 0 &&
                 text_dim > 0 && in_channels > 0 && audio_channels > 0 && time_embed_hidden > 0 &&
                 time_embed_dim > 0,
             "H3Config: every dimension must be positive");
  H3RT_CHECK(freq_dim > 0 && freq_dim % 2 == 0, "H3Config: freq_dim ", freq_dim, " must be even");
  H3RT_CHECK(rope_dim() <= head_dim && rope_dim() % 2 == 0, "H3Config: rope_dim ", rope_dim(),
             " exceeds head_dim ", head_dim);
  H3RT_CHECK(adaln_curve_grid == 0 || (adaln_curve_grid >= 2 && adaln_curve_rank > 0),
             "H3Config: the curve-form AdaLN needs a table of >= 2 grid rows and rank > 0, got ",
             adaln_curve_grid, " x ", adaln_curve_rank);
  H3RT_CHECK(pdd_heads >= 1, "H3Config: pdd_heads ", pdd_heads, " must be >= 1");
}

std::optional<H3Config> config_preset(const std::string& name) {
  if (name == "tiny") return H3Config::tiny();
  if (name == "h3") return H3Config::h3();
  return std::nullopt;
}

const char* precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : "fp32";
}

namespace {

template <class F>
const SafetensorsEntry& need(const F& f, const std::string& key, size_t rank) {
  const SafetensorsEntry* e = f.find(key);
  H3RT_CHECK(e != nullptr, f.path(), ": cannot infer the H3 config: key '", key, "' is missing");
  H3RT_CHECK(e->shape.size() == rank, f.path(), ": cannot infer the H3 config: '", key,
             "' has shape ", shape_str(e->shape), ", expected rank ", rank);
  return *e;
}

// Number of distinct i in keys "<prefix><i>." (block indices need not be listed in order).
template <class F>
int64_t count_blocks(const F& f, const std::string& prefix) {
  std::set<int64_t> ids;
  for (const auto& e : f.entries()) {
    if (e.name.rfind(prefix, 0) != 0) continue;
    const size_t dot = e.name.find('.', prefix.size());
    const std::string num = e.name.substr(prefix.size(), dot - prefix.size());
    // Longer numbers are no block index (the key is then reported as unexpected).
    if (!num.empty() && num.size() <= 9 && num.find_first_not_of("0123456789") == std::string::npos)
      ids.insert(std::stoll(num));
  }
  return static_cast<int64_t>(ids.size());
}

template <class F>
bool has_prefix(const F& f, const std::string& prefix) {
  for (const auto& e : f.entries())
    if (e.name.rfind(prefix, 0) == 0) return true;
  return false;
}

// The AdaLN form: the curve table adaln_t_table [grid, rank] (ComfyUI's pruned files), or the
// time embedder. A file holding both is ambiguous and refused.
template <class F>
void infer_adaln(const F& f, H3Config& c) {
  const SafetensorsEntry* table = f.find("adaln_t_table");
  if (!table) {
    const auto& tin = need(f, "time_embedder.proj_in.weight", 2);
    c.time_embed_hidden = tin.shape[0];
    c.freq_dim = tin.shape[1];
    c.time_embed_dim = need(f, "time_embedder.proj_out.weight", 2).shape[0];
    return;
  }
  H3RT_CHECK(!has_prefix(f, "time_embedder."), f.path(),
             ": holds both 'adaln_t_table' (curve-form AdaLN) and 'time_embedder.*' (full "
             "form); an H3 checkpoint has one of them");
  H3RT_CHECK(table->shape.size() == 2, f.path(), ": 'adaln_t_table' has shape ",
             shape_str(table->shape), ", expected [grid, rank]");
  H3RT_CHECK(table->shape[0] >= 2 && table->shape[1] >= 1, f.path(), ": 'adaln_t_table' has shape ",
             shape_str(table->shape), ", expected >= 2 grid rows and rank >= 1");
  c.adaln_curve_grid = table->shape[0];
  c.adaln_curve_rank = table->shape[1];
}

// n of a PDD head bank: final_layer.video_out rows / (4 x latent channels).
template <class F>
int64_t infer_pdd_heads(const F& f, const H3Config& c) {
  const auto& vout = need(f, "final_layer.video_out.weight", 2);
  H3RT_CHECK(vout.shape[0] >= c.video_features() && vout.shape[0] % c.video_features() == 0,
             f.path(), ": final_layer.video_out.weight has ", vout.shape[0], " rows, expected ",
             c.video_features(), " or a PDD head bank of n x ", c.video_features());
  return vout.shape[0] / c.video_features();
}

// Tensor names and shapes of caller-owned tensors, read like a file's header.
class EntryList {
 public:
  EntryList(const std::map<std::string, Tensor>& tensors, std::string origin)
      : origin_(std::move(origin)) {
    for (const auto& [name, t] : tensors) entries_.push_back({name, t.dtype(), t.shape()});
  }
  const std::string& path() const { return origin_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(const std::string& name) const {
    for (const auto& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }

 private:
  std::string origin_;
  std::vector<SafetensorsEntry> entries_;
};

template <class F>
H3Config infer_from(const F& f) {
  H3Config c;
  const auto& cond = need(f, "condition_proj.weight", 2);
  c.hidden = cond.shape[0];
  c.text_dim = cond.shape[1];
  const auto& qkv = need(f, "blocks.0.attn.qkv_proj.weight", 2);
  H3RT_CHECK(qkv.shape[0] % (3 * c.head_dim) == 0, f.path(), ": qkv_proj rows ", qkv.shape[0],
             " are not a multiple of 3 x head_dim ", c.head_dim);
  c.heads = qkv.shape[0] / 3 / c.head_dim;
  c.layers = count_blocks(f, "blocks.");
  c.refiner_layers = count_blocks(f, "token_refiner.blocks.");
  c.ffn = need(f, "blocks.0.mlp.fc1.weight", 2).shape[0] / 2;
  infer_adaln(f, c);
  const auto& vin = need(f, "video_patch_proj.weight", 2);
  H3RT_CHECK(vin.shape[1] % 4 == 0 && vin.shape[1] > 0, f.path(), ": video_patch_proj has ",
             vin.shape[1], " input features, expected 4 x latent channels (patch 1x2x2)");
  c.in_channels = vin.shape[1] / 4;
  c.audio_channels = need(f, "audio_patch_proj.weight", 2).shape[1];
  c.pdd_heads = infer_pdd_heads(f, c);
  if (const auto* inv = f.find("rope.inv_freq"); inv && inv->shape.size() == 1)
    c.rope_freqs = inv->shape[0];
  c.validate();
  return c;
}

}  // namespace

H3Config infer_config(const SafetensorsFile& f) {
  return infer_from(f);
}

H3Config infer_config(const std::map<std::string, Tensor>& tensors, const std::string& origin) {
  return infer_from(EntryList(tensors, origin));
}

}  // namespace h3rt
