// Conditioning from an inputs file: keyframe/<i>/..., ref/<i>/..., text tags, denoise masks and
// the augmentation settings (names in pipeline.h and the README's "Inputs files").
#include <set>
#include <string>

#include "h3rt/formats.h"
#include "h3rt/pipeline.h"
#include "h3rt/safetensors.h"

namespace h3rt {
namespace {

FloatVec floats(const Tensor& t) {
  const std::vector<float> v = t.to_f32();
  return FloatVec(v.begin(), v.end());
}

// A float32 tensor whose shape, leading 1s dropped, is `want` (-1: any size, returned in *got).
Tensor f32_tensor(const SafetensorsFile& f, const std::string& name, Shape want, Shape* got,
                  const std::string& expected) {
  Tensor t = f.get(name);
  Shape s = t.shape();
  while (s.size() > want.size() && s.front() == 1) s.erase(s.begin());
  bool ok = t.dtype() == DType::f32 && s.size() == want.size();
  for (size_t i = 0; ok && i < s.size(); ++i) ok = want[i] < 0 || want[i] == s[i];
  H3RT_CHECK(ok, f.path(), ": tensor '", name, "' is ", dtype_name(t.dtype()), " ",
             shape_str(t.shape()), ", expected f32 ", expected);
  *got = s;
  return t;
}

VideoLatent video_latent(const SafetensorsFile& f, const std::string& name, int64_t channels) {
  Shape s;
  const Tensor t = f32_tensor(f, name, {channels, -1, -1, -1}, &s,
                              "[1, " + std::to_string(channels) + ", T, Hl, Wl]");
  return {floats(t), s[1], s[2], s[3]};
}

AudioLatent audio_latent(const SafetensorsFile& f, const std::string& name, int64_t channels) {
  Shape s;
  const Tensor t =
      f32_tensor(f, name, {2, channels, -1}, &s, "[2, " + std::to_string(channels) + ", N]");
  return {floats(t), s[2]};
}

FloatVec optional_floats(const SafetensorsFile& f, const std::string& name) {
  if (!f.contains(name)) return {};
  const Tensor t = f.get(name);
  H3RT_CHECK(t.dtype() == DType::f32, f.path(), ": tensor '", name, "' is ", dtype_name(t.dtype()),
             ", expected f32");
  return floats(t);
}

const std::string* meta(const SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  return it == f.metadata().end() ? nullptr : &it->second;
}

template <typename T, typename Parse>
T parse_meta(const SafetensorsFile& f, const std::string& key, T fallback, Parse parse,
             const char* expected) {
  const std::string* v = meta(f, key);
  if (!v) return fallback;
  try {
    size_t used = 0;
    const T x = parse(*v, &used);
    if (used == v->size()) return x;
  } catch (const std::exception&) {
  }
  H3RT_FAIL(f.path(), ": metadata '", key, "' is '", *v, "', expected ", expected);
}

double meta_double(const SafetensorsFile& f, const std::string& key, double fallback) {
  return parse_meta<double>(
      f, key, fallback, [](const std::string& s, size_t* n) { return std::stod(s, n); },
      "a decimal number");
}

int64_t meta_int(const SafetensorsFile& f, const std::string& key, int64_t fallback) {
  return parse_meta<int64_t>(
      f, key, fallback, [](const std::string& s, size_t* n) { return std::stoll(s, n); },
      "an integer");
}

// How many consecutive <prefix>/<i>/ groups the file holds (tensors or metadata); a group past
// a gap is an error naming it.
int64_t group_count(const SafetensorsFile& f, const std::string& prefix) {
  std::set<int64_t> seen;
  auto note = [&](const std::string& name) {
    if (name.rfind(prefix + "/", 0) != 0) return;
    const std::string rest = name.substr(prefix.size() + 1);
    const size_t slash = rest.find('/');
    size_t used = 0;
    int64_t i = -1;
    try {
      i = std::stoll(rest.substr(0, slash), &used);
    } catch (const std::exception&) {
    }
    H3RT_CHECK(slash != std::string::npos && used == slash && i >= 0, f.path(), ": name '", name,
               "' is not ", prefix, "/<index>/<field>");
    seen.insert(i);
  };
  for (const SafetensorsEntry& e : f.entries()) note(e.name);
  for (const auto& [k, v] : f.metadata()) note(k);
  const int64_t n = static_cast<int64_t>(seen.size());
  H3RT_CHECK(seen.empty() || *seen.rbegin() == n - 1, f.path(), ": ", prefix,
             " indices must run 0..", n - 1, " without gaps, found ", *seen.rbegin());
  return n;
}

ReferenceKind ref_kind(const SafetensorsFile& f, const std::string& key) {
  const std::string* v = meta(f, key);
  H3RT_CHECK(v, f.path(), ": metadata '", key, "' is missing (image, video or audio)");
  if (*v == "image") return ReferenceKind::image;
  if (*v == "video" || *v == "video_audio") return ReferenceKind::video;
  if (*v == "audio") return ReferenceKind::audio;
  H3RT_FAIL(f.path(), ": metadata '", key, "' is '", *v, "', expected image, video or audio");
}

// The video and audio latents and noise of keyframe/<i> or ref/<i>.
template <typename Cond>
void read_latents(const SafetensorsFile& f, const std::string& p, const H3Config& c, Cond& k) {
  if (f.contains(p + "video")) k.video = video_latent(f, p + "video", c.in_channels);
  if (f.contains(p + "audio")) k.audio = audio_latent(f, p + "audio", c.audio_channels);
  k.noise.video = optional_floats(f, p + "video_noise");
  k.noise.audio = optional_floats(f, p + "audio_noise");
}

std::vector<int32_t> text_tags(const SafetensorsFile& f) {
  if (!f.contains("input/text_token_tags")) return {};
  const Tensor t = f.get("input/text_token_tags");
  H3RT_CHECK(t.dim() == 1, f.path(), ": tensor 'input/text_token_tags' has shape ",
             shape_str(t.shape()), ", expected [L]");
  std::vector<int32_t> tags;
  for (double v : t.to_f64()) tags.push_back(static_cast<int32_t>(v));
  return tags;
}

// An optional f32 tensor (a mask or a latent image); its size is checked against the target's
// in layout_spec.
FloatVec mask(const SafetensorsFile& f, const std::string& name, Shape want,
              const std::string& expected) {
  if (!f.contains(name)) return {};
  Shape s;
  return floats(f32_tensor(f, name, want, &s, expected));
}

}  // namespace

Conditioning conditioning_from_inputs(const std::string& path, const H3Config& c, bool* found,
                                      uint64_t default_seed) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  Conditioning k;
  for (int64_t i = 0, n = group_count(f, "keyframe"); i < n; ++i) {
    const std::string p = "keyframe/" + std::to_string(i) + "/";
    KeyframeCond kf;
    H3RT_CHECK(meta(f, p + "frame_index"), path, ": metadata '", p,
               "frame_index' is missing (the keyframe's pixel frame)");
    kf.frame_index = meta_int(f, p + "frame_index", 0);
    read_latents(f, p, c, kf);
    k.keyframes.push_back(std::move(kf));
  }
  for (int64_t i = 0, n = group_count(f, "ref"); i < n; ++i) {
    const std::string p = "ref/" + std::to_string(i) + "/";
    ReferenceCond r;
    r.kind = ref_kind(f, p + "kind");
    read_latents(f, p, c, r);
    k.refs.push_back(std::move(r));
  }
  k.text_tags = text_tags(f);
  k.video_mask = mask(f, "input/video_denoise_mask", {-1, -1, -1}, "[T, Hl, Wl]");
  k.audio_mask = mask(f, "input/audio_denoise_mask", {2, -1}, "[2, N]");
  k.video_latent_image = mask(f, "input/video_latent_image", {c.in_channels, -1, -1, -1},
                              "[1, " + std::to_string(c.in_channels) + ", T, Hl, Wl]");
  k.audio_latent_image = mask(f, "input/audio_latent_image", {2, c.audio_channels, -1},
                              "[2, " + std::to_string(c.audio_channels) + ", N]");
  k.aug.video = meta_double(f, "visual_cond_noise_aug", kVisualCondTimestep);
  k.aug.audio = meta_double(f, "audio_cond_noise_aug", kAudioCondTimestep);
  k.noise_seed =
      static_cast<uint64_t>(meta_int(f, "cond_seed", static_cast<int64_t>(default_seed)));
  *found = !k.empty() || meta(f, "visual_cond_noise_aug") || meta(f, "audio_cond_noise_aug");
  return k;
}

}  // namespace h3rt
