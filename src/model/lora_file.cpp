// LoRA files: ComfyUI's key forms, pairing and validation (h3rt/lora.h), and the target groups
// `h3rt info` prints.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>

#include "h3rt/check.h"
#include "h3rt/lora.h"

namespace h3rt {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

// The linear layers of H3 (original key prefixes), per block and at the top level.
const std::vector<std::string>& block_linears() {
  static const std::vector<std::string> v = {"attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2",
                                             "adaln_proj.linear"};
  return v;
}
const std::vector<std::string>& top_linears() {
  static const std::vector<std::string> v = {
      "video_patch_proj",      "audio_patch_proj",       "condition_proj",
      "time_embedder.proj_in", "time_embedder.proj_out", "final_layer.adaln_proj.linear",
      "final_layer.video_out", "final_layer.audio_out"};
  return v;
}

std::string underscored(std::string s) {
  for (char& c : s)
    if (c == '.') c = '_';
  return s;
}

// `rest` = "<digits><sep><suffix>" for one of the block linears (in `sep` spelling).
std::string block_layer(const std::string& prefix, const std::string& rest, char sep) {
  size_t n = 0;
  while (n < rest.size() && n < 9 && std::isdigit(static_cast<unsigned char>(rest[n]))) ++n;
  if (n == 0 || n >= rest.size() || rest[n] != sep) return {};
  const std::string tail = rest.substr(n + 1);
  for (const auto& l : block_linears())
    if (tail == (sep == '.' ? l : underscored(l))) return prefix + rest.substr(0, n) + "." + l;
  return {};
}

// A key's adapter role: which half of a pair, or the alpha.
enum class Role { up, down, alpha };
struct Suffix {
  const char* text;
  Role role;
  const char* form;  // the pair's spelling, so that one module does not mix two
};
const std::vector<Suffix>& suffixes() {
  static const std::vector<Suffix> v = {
      {".lora_up.weight", Role::up, "lora_up/lora_down"},
      {".lora_down.weight", Role::down, "lora_up/lora_down"},
      {".lora_B.default.weight", Role::up, "lora_B.default/lora_A.default"},
      {".lora_A.default.weight", Role::down, "lora_B.default/lora_A.default"},
      {".lora_B.weight", Role::up, "lora_B/lora_A"},
      {".lora_A.weight", Role::down, "lora_B/lora_A"},
      {".lora_B", Role::up, "lora_B/lora_A (no .weight)"},
      {".lora_A", Role::down, "lora_B/lora_A (no .weight)"},
      {".lora.up.weight", Role::up, "lora.up/lora.down"},
      {".lora.down.weight", Role::down, "lora.up/lora.down"},
      {".alpha", Role::alpha, nullptr}};
  return v;
}

// Adapter kinds ComfyUI knows that h3rt does not merge (named in the error).
const char* unsupported_kind(const std::string& key) {
  static const std::vector<std::pair<const char*, const char*>> kinds = {
      {".lora_mid.weight", "LoCon mid weights"}, {".dora_scale", "DoRA"},
      {".diff_b", "bias diffs (diff_b)"},        {".diff", "weight diffs (diff)"},
      {".set_weight", "set_weight patches"},     {".w_norm", "norm diffs (w_norm)"},
      {".b_norm", "norm diffs (b_norm)"},        {".reshape_weight", "reshaped LoRAs"}};
  for (const auto& [s, what] : kinds)
    if (ends_with(key, s)) return what;
  if (key.find(".hada_") != std::string::npos) return "LoHa";
  if (key.find(".lokr_") != std::string::npos) return "LoKr";
  if (ends_with(key, ".a1.weight") || ends_with(key, ".b1.weight")) return "GLoRA";
  return nullptr;
}

const Suffix* suffix_of(const std::string& key) {
  for (const auto& s : suffixes())
    if (ends_with(key, s.text) && key.size() > std::string(s.text).size()) return &s;
  return nullptr;
}

// The H3 layer a module name targets: "diffusion_model.<layer>", "lora_unet_<layer_>" or the
// bare layer.
std::string target_of(const std::string& module) {
  const std::string dm = "diffusion_model.", unet = "lora_unet_";
  if (starts_with(module, dm)) return h3_linear_layer(module.substr(dm.size()));
  if (starts_with(module, unet)) {
    const std::string rest = module.substr(unet.size());
    return rest.find('.') == std::string::npos ? h3_linear_layer(rest) : std::string();
  }
  return h3_linear_layer(module);
}

bool is_float(DType t) {
  return t == DType::f32 || t == DType::bf16 || t == DType::f16;
}

class Problems {
 public:
  template <typename... A>
  void add(A&&... a) {
    lines_.push_back(detail::concat(std::forward<A>(a)...));
  }
  void throw_if_any(const std::string& path) const {
    if (lines_.empty()) return;
    std::ostringstream os;
    os << "invalid LoRA " << path << ": " << lines_.size() << " problem(s)";
    for (const auto& l : lines_) os << "\n  " << l;
    throw Error(os.str());
  }

 private:
  std::vector<std::string> lines_;
};

struct Keys {
  std::string up, down, alpha;
  const char* form = nullptr;
};

void check_pair(const LoraPair& p, Problems& problems) {
  const Tensor &b = p.up, &a = p.down;
  for (const auto* t : {&b, &a})
    if (!is_float(t->dtype()) || t->dim() != 2) {
      problems.add("'", t == &b ? p.up_key : p.down_key, "' is ", dtype_name(t->dtype()), " ",
                   shape_str(t->shape()), ", expected a 2-D f32, bf16 or f16 matrix");
      return;
    }
  if (b.size(1) != a.size(0) || a.size(0) < 1)
    problems.add("rank mismatch in module '", p.module, "': '", p.up_key, "' is ",
                 shape_str(b.shape()), " ([out, rank]) but '", p.down_key, "' is ",
                 shape_str(a.shape()), " ([rank, in])");
  if (!p.alpha_key.empty() && !std::isfinite(p.alpha))
    problems.add("'", p.alpha_key, "' holds ", p.alpha, ", expected a finite alpha");
}

}  // namespace

std::string h3_linear_layer(const std::string& path) {
  const bool dotted = path.find('.') != std::string::npos;
  const char sep = dotted ? '.' : '_';
  for (const auto& l : top_linears())
    if (path == (dotted ? l : underscored(l))) return l;
  for (const std::string prefix : {"token_refiner.blocks.", "blocks."}) {
    const std::string spelled = dotted ? prefix : underscored(prefix);
    if (starts_with(path, spelled)) {
      std::string l = block_layer(prefix, path.substr(spelled.size()), sep);
      if (!l.empty()) return l;
    }
  }
  return {};
}

float LoraPair::scale(double strength) const {
  if (alpha_key.empty()) return static_cast<float>(strength);
  return static_cast<float>(strength * (alpha / static_cast<double>(rank())));
}

LoraSpec parse_lora_spec(const std::string& arg) {
  LoraSpec s{arg, 1.0};
  const size_t colon = arg.rfind(':');
  if (colon == std::string::npos) return s;
  const std::string tail = arg.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(tail.c_str(), &end);
  if (tail.empty() || end != tail.c_str() + tail.size() || errno != 0) {
    // Part of the path (paths may hold colons), unless only the part before it is a file.
    std::error_code ec;
    H3RT_CHECK(std::filesystem::exists(arg, ec) ||
                   !std::filesystem::is_regular_file(arg.substr(0, colon), ec),
               "LoRA '", arg, "': '", tail, "' after the file is not a strength (a finite number, ",
               "as in ", arg.substr(0, colon), ":0.8)");
    return s;
  }
  H3RT_CHECK(std::isfinite(v), "LoRA '", arg, "': strength ", tail, " is not a finite number");
  H3RT_CHECK(colon > 0, "LoRA '", arg, "': no file before the strength");
  return {arg.substr(0, colon), v};
}

bool is_lora_file(const SafetensorsFile& f) {
  for (const auto& e : f.entries())
    if (const Suffix* s = suffix_of(e.name); s && s->role != Role::alpha) return true;
  return false;
}

namespace {

// The tensors of a LoRA by key, from a file or from memory.
struct LoraSource {
  std::vector<std::string> keys;  // in the order pairs are read
  std::function<Tensor(const std::string&)> get;
  std::shared_ptr<const void> keep;  // keeps get()'s views alive
};

// In-memory tensors must be what a file would give: host, dense.
LoraSource memory_source(const LoraSpec& spec) {
  const auto& tensors = spec.tensors;
  LoraSource src{{}, [tensors](const std::string& k) { return tensors->at(k); }, tensors};
  for (const auto& [key, t] : *tensors) {
    H3RT_CHECK(t.device() == Device::cpu && t.is_contiguous(), "LoRA ", spec.path, ": tensor '",
               key, "' must be a contiguous host tensor");
    src.keys.push_back(key);
  }
  return src;
}

Lora read_pairs(const LoraSource& source, const LoraSpec& spec) {
  Problems problems;
  std::vector<std::string> unsupported;
  std::map<std::string, Keys> modules;
  std::vector<std::string> order;  // modules in the order of their first key
  for (const std::string& name : source.keys) {
    if (const char* kind = unsupported_kind(name)) {
      unsupported.push_back(detail::concat("key '", name, "': ", kind,
                                           " are not supported (LoRA up/down pairs only)"));
      continue;
    }
    const Suffix* s = suffix_of(name);
    if (!s) {
      problems.add("key '", name, "' is not a LoRA key (expected <module>.lora_A.weight / ",
                   "lora_B.weight, lora_down.weight / lora_up.weight or .alpha)");
      continue;
    }
    const std::string module = name.substr(0, name.size() - std::string(s->text).size());
    if (!modules.count(module)) order.push_back(module);
    Keys& k = modules[module];
    if (s->role == Role::alpha) {
      k.alpha = name;
      continue;
    }
    if (k.form && std::string(k.form) != s->form) {
      problems.add("module '", module, "' mixes the ", k.form, " and ", s->form, " key forms");
      continue;
    }
    k.form = s->form;
    (s->role == Role::up ? k.up : k.down) = name;
  }
  Lora lora{spec.path, spec.strength, {}, std::move(unsupported), source.keep};
  std::map<std::string, std::string> by_target;  // target -> module
  for (const auto& module : order) {
    const Keys& k = modules[module];
    if (k.up.empty() || k.down.empty()) {
      if (k.up.empty() && k.down.empty())
        problems.add("'", k.alpha, "' has no lora up/down pair beside it");
      else
        problems.add("module '", module, "' has '", k.up.empty() ? k.down : k.up,
                     "' but not the other half of the pair (", k.form, ")");
      continue;
    }
    LoraPair p;
    p.module = module;
    p.target = target_of(module);
    p.up_key = k.up;
    p.down_key = k.down;
    p.up = source.get(k.up);
    p.down = source.get(k.down);
    if (!k.alpha.empty()) {
      const Tensor a = source.get(k.alpha);
      if (a.numel() != 1 || !is_float(a.dtype())) {
        problems.add("'", k.alpha, "' is ", dtype_name(a.dtype()), " ", shape_str(a.shape()),
                     ", expected one float value");
        continue;
      }
      p.alpha_key = k.alpha;
      p.alpha = a.to_f64()[0];
    }
    check_pair(p, problems);
    if (!p.target.empty() && !by_target.emplace(p.target, module).second)
      problems.add("modules '", by_target[p.target], "' and '", module, "' both target layer '",
                   p.target, "'");
    lora.pairs.push_back(std::move(p));
  }
  problems.throw_if_any(spec.path);
  H3RT_CHECK(!lora.pairs.empty() || !lora.unsupported.empty(), "LoRA ", spec.path,
             " holds no LoRA pairs");
  return lora;
}

void check_strength(const LoraSpec& spec) {
  H3RT_CHECK(std::isfinite(spec.strength), "LoRA ", spec.path, ": strength ", spec.strength,
             " is not finite");
}

Lora read_file(std::shared_ptr<const SafetensorsFile> file, const LoraSpec& spec) {
  LoraSource src{{}, [f = file.get()](const std::string& k) { return f->get(k); }, file};
  for (const auto& e : file->entries()) src.keys.push_back(e.name);
  return read_pairs(src, spec);
}

}  // namespace

Lora read_lora(const LoraSpec& spec) {
  check_strength(spec);  // before the file is opened
  if (spec.tensors) return read_pairs(memory_source(spec), spec);
  return read_file(std::make_shared<const SafetensorsFile>(SafetensorsFile::open(spec.path)), spec);
}

Lora read_lora(std::shared_ptr<const SafetensorsFile> file, const LoraSpec& spec) {
  H3RT_CHECK(file, "read_lora: no file");
  check_strength(spec);
  return read_file(std::move(file), spec);
}

std::vector<LoraTargetGroup> lora_target_groups(const Lora& lora) {
  std::map<std::string, LoraTargetGroup> groups;
  for (const auto& p : lora.pairs) {
    std::string pattern = p.target.empty() ? "(unknown: " + p.module + ")" : p.target;
    int64_t block = -1;
    for (const std::string prefix : {"token_refiner.blocks.", "blocks."})
      if (!p.target.empty() && starts_with(p.target, prefix)) {
        const size_t dot = p.target.find('.', prefix.size());
        block = std::stoll(p.target.substr(prefix.size(), dot - prefix.size()));
        pattern = prefix + "*" + p.target.substr(dot);
        break;
      }
    LoraTargetGroup& g = groups[pattern];
    g.pattern = pattern;
    if (block >= 0) g.blocks.push_back(block);
    ++g.ranks[p.rank()];
    if (!p.alpha_key.empty()) ++g.alphas[p.alpha];
  }
  std::vector<LoraTargetGroup> out;
  for (auto& [k, g] : groups) {
    std::sort(g.blocks.begin(), g.blocks.end());
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace h3rt
