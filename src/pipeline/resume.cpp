// Resume files: the loop state and the run's identity (model, device, request, sampler options)
// in a safetensors file written through the atomic writer (temp file + rename).
#include "pipeline/resume.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "h3rt/safetensors.h"

namespace h3rt::resume {
namespace {

constexpr const char* kFormat = "h3rt-resume/1";

// FNV-1a, 64 bits: a stable fingerprint across platforms (not a cryptographic hash).
struct Fnv {
  uint64_t h = 14695981039346656037ull;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  template <typename T>
  void add_vec(const T& v) {
    add(v.data(), v.size() * sizeof(v[0]));
  }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
  }
};

std::string f64_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

std::string request_fingerprint(const Request& r) {
  const SequenceLayout& L = r.layout;
  const int64_t dims[5] = {L.text_len, L.audio_len, L.frames, L.height, L.width};
  Fnv f;
  f.add(dims, sizeof dims);
  f.add_vec(r.video_rows);
  f.add_vec(r.audio_rows);
  f.add_vec(r.text);
  // The denoise masks and the latents they keep steer the trajectory (absent: nothing added,
  // so files of unmasked runs keep their fingerprint).
  const Conditioning& k = r.conditioning;
  const FloatVec* fields[] = {&k.video_mask, &k.audio_mask, &k.video_latent_image,
                              &k.audio_latent_image};
  for (unsigned char i = 0; i < 4; ++i)
    if (!fields[i]->empty()) {
      f.add(&i, 1);
      f.add_vec(*fields[i]);
    }
  return f.hex();
}

// The first 8 + n bytes of a safetensors file (length and JSON header) and its size. `what`
// names the file's role in the errors ("checkpoint", "LoRA file").
std::string header_identity(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  H3RT_CHECK(in, what, " ", path, ": cannot open: ", std::strerror(errno));
  const auto size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  unsigned char len[8] = {};
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  H3RT_CHECK(in && n <= size - 8, what, " ", path, ": not a safetensors file (header length ", n,
             ")");
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  Fnv f;
  f.add(len, 8);
  f.add(header.data(), header.size());
  f.add(&size, sizeof size);
  return "safetensors header fnv1a64 " + f.hex() + ", " + std::to_string(size) + " bytes";
}

Tensor rows_tensor(const FloatVec& v, const Shape& shape) {
  return tensor_from_f32({v.begin(), v.end()}, shape);
}

FloatVec read_rows(const SafetensorsFile& f, const std::string& name, const Shape& shape) {
  const std::vector<float> v = f.get(name, DType::f32, shape).to_f32();
  return FloatVec(v.begin(), v.end());
}

constexpr const char* kOff = "off";

std::string meta(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata().find(key);
  H3RT_CHECK(it != f.metadata().end(), f.path(), ": not an h3rt resume file (no '", key,
             "' in its metadata)");
  return it->second;
}

// The sparse check's part of the sparse_attention key (nothing when off: files from before it
// still match).
std::string check_text(const SparseCheckOptions& k) {
  if (!k.enabled()) return "";
  return ", check every " + std::to_string(k.every) + " bound " + f64_text(k.bound) + " tiles " +
         std::to_string(k.tiles);
}

}  // namespace

RunKeys run_keys(const Denoiser& d, const Request& r, const SampleOptions& o) {
  const SequenceLayout& L = r.layout;
  std::string model = o.model_identity;
  if (model.empty()) {
    const H3Config& c = d.config();
    model = "config hidden " + std::to_string(c.hidden) + ", layers " + std::to_string(c.layers) +
            " (no model identity given)";
  }
  RunKeys keys = {{"model", model},
          {"device", d.device_name()},
          {"precision", d.precision() == Precision::bf16 ? "bf16" : "fp32"},
          {"scheduler", scheduler_name(o.scheduler)},
          {"sampler", sampler_name(o.sampler)},
          {"steps", std::to_string(o.steps)},
          {"shift_video", f64_text(o.video_shift)},
          {"shift_audio", f64_text(o.audio_shift)},
          {"seed", std::to_string(o.noise_seed)},
          {"layout", "text " + std::to_string(L.text_len) + ", audio " +
                         std::to_string(L.audio_len) + ", latent " + std::to_string(L.frames) +
                         "x" + std::to_string(L.height) + "x" + std::to_string(L.width)},
          {"request", "starting latents and text fnv1a64 " + request_fingerprint(r)}};
  // The hybrid changes the trajectory ("off" also stands for a file written before these keys).
  const SparseAttention& sp = o.hybrid.sparse;
  keys.push_back({"sparse_attention",
                  !sp.enabled()
                      ? std::string(kOff)
                      : "tau " + f64_text(sp.tau) + ", dense steps " +
                            std::to_string(o.hybrid.dense_steps) + ", dense blocks " +
                            std::to_string(sp.dense_blocks) + ", band " + std::to_string(sp.band) +
                            ", max blocks " + std::to_string(sp.max_blocks) +
                            (sp.video_rows_only ? ", video rows only" : ", all rows") +
                            check_text(o.hybrid.check)});
  keys.push_back({"step_cache", !o.step_cache.enabled()
                                    ? std::string(kOff)
                                    : "threshold " + f64_text(o.step_cache.threshold) +
                                          ", max reuses " +
                                          std::to_string(o.step_cache.max_reuses)});
  return keys;
}

void write(const std::string& path, const RunKeys& keys, const LoopState& st,
           const Shape& video_shape, const Shape& audio_shape) {
  std::map<std::string, std::string> m(keys.begin(), keys.end());
  m["format"] = kFormat;
  m["steps_done"] = std::to_string(st.steps_done);
  m["has_old_denoised"] = st.comfy.has_old ? "1" : "0";
  uint32_t bits = 0;
  std::memcpy(&bits, &st.comfy.old_sigma_down, 4);
  m["old_sigma_down_bits"] = std::to_string(bits);
  NamedTensors t = {{"video_rows", rows_tensor(st.video_rows, video_shape)},
                    {"audio_rows", rows_tensor(st.audio_rows, audio_shape)}};
  if (st.comfy.has_old) {
    t.push_back({"old_denoised_video", rows_tensor(st.comfy.old_video, video_shape)});
    t.push_back({"old_denoised_audio", rows_tensor(st.comfy.old_audio, audio_shape)});
  }
  write_safetensors(path, t, m);
}

LoopState read(const std::string& path, const RunKeys& keys, const Shape& video_shape,
               const Shape& audio_shape, int total_steps) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  H3RT_CHECK(meta(f, "format") == kFormat, path, ": resume format '", meta(f, "format"),
             "', expected '", kFormat, "'");
  std::string diff;
  for (const auto& [key, here] : keys) {
    const bool hybrid_key = key == "sparse_attention" || key == "step_cache";
    const bool absent = f.metadata().find(key) == f.metadata().end();
    const std::string there = hybrid_key && absent ? std::string(kOff) : meta(f, key);
    if (there != here)
      diff += std::string(diff.empty() ? "" : "; ") + key + " is '" + there + "' there, '" + here +
              "' here";
  }
  H3RT_CHECK(diff.empty(), path, ": resume file belongs to another run: ", diff);
  LoopState st;
  st.steps_done = std::stoi(meta(f, "steps_done"));
  H3RT_CHECK(st.steps_done >= 0 && st.steps_done <= total_steps, path, ": ", st.steps_done,
             " steps done, outside [0, ", total_steps, "]");
  st.video_rows = read_rows(f, "video_rows", video_shape);
  st.audio_rows = read_rows(f, "audio_rows", audio_shape);
  st.comfy.has_old = meta(f, "has_old_denoised") == "1";
  const uint32_t bits = static_cast<uint32_t>(std::stoul(meta(f, "old_sigma_down_bits")));
  std::memcpy(&st.comfy.old_sigma_down, &bits, 4);
  if (st.comfy.has_old) {
    st.comfy.old_video = read_rows(f, "old_denoised_video", video_shape);
    st.comfy.old_audio = read_rows(f, "old_denoised_audio", audio_shape);
  }
  return st;
}

}  // namespace h3rt::resume

namespace h3rt {
namespace {

// In-memory LoRA tensors (LoraSpec::tensors): their keys, dtypes, shapes and bytes.
std::string tensors_identity(const std::map<std::string, Tensor>& tensors) {
  resume::Fnv f;
  for (const auto& [key, t] : tensors) {
    f.add(key.data(), key.size() + 1);
    const int dtype = static_cast<int>(t.dtype());
    f.add(&dtype, sizeof dtype);
    f.add_vec(t.shape());
    f.add(t.data(), static_cast<size_t>(t.nbytes()));
  }
  return "in-memory tensors fnv1a64 " + f.hex();
}

}  // namespace

std::string model_identity(const ModelSource& s, const DenoiserOptions& o) {
  std::string id = s.checkpoint.empty()
                       ? "preset " + s.preset + ", weights seed " + std::to_string(s.weights_seed)
                       : resume::header_identity(s.checkpoint, "checkpoint");
  if (!s.checkpoint.empty()) id += "; qkv layout " + std::to_string(static_cast<int>(s.qkv_layout));
  if (!s.qkv_override.empty())
    id += "; qkv override " + resume::header_identity(s.qkv_override, "qkv override");
  id += std::string("; attention ") + (o.attention == Attention::sage ? "sage" : "bf16");
  id += std::string("; fp8 activations ") +
        (o.fp8_activations == Fp8Activations::dynamic ? "dynamic" : "static");
  if (o.synthetic_gemm != SyntheticGemm::bf16)  // (bf16: the identity files had before)
    id += std::string("; gemm ") + synthetic_gemm_name(o.synthetic_gemm) +
          (o.synthetic_gemm == SyntheticGemm::int8 && config_preset(s.preset)
               ? " group " +
                     std::to_string(synthetic_int8_group(*config_preset(s.preset), o.int8_group))
               : "");
  // LoRAs change the weights: each file's identity and strength, in merge order (nothing without
  // any, so the identity files had before stays).
  for (const LoraSpec& l : o.loras)
    id +=
        "; lora " +
        (l.tensors ? tensors_identity(*l.tensors) : resume::header_identity(l.path, "LoRA file")) +
        " strength " + resume::f64_text(l.strength);
  if (!o.loras.empty() && o.lora_skip_unmatched) id += "; lora pairs that do not fit skipped";
  return id;
}

}  // namespace h3rt
