#include "conditioning.h"

#include <nanobind/stl/string.h>

#include <string>

#include "h3rt/layout.h"

namespace h3rt::py {
namespace {

std::string item_name(const char* list, size_t i, const char* key) {
  return std::string(list) + "[" + std::to_string(i) + "]['" + key + "']";
}

std::optional<AnyArray> array_item(const nb::dict& d, const char* key, const std::string& name) {
  if (!d.contains(key) || d[key].is_none()) return std::nullopt;
  AnyArray a;
  if (!nb::try_cast(d[key], a)) raise_type(name + ": not an array (numpy, torch, ...)");
  return a;
}

// [1, C, vt, h, w] (ComfyUI's latent) -> [C, vt, h, w] values.
VideoLatent video_item(const nb::dict& d, const std::string& name, int64_t C, bool cuda) {
  const std::optional<AnyArray> a = array_item(d, "latent", name);
  if (!a) return {};
  const std::string want = "[1, " + std::to_string(C) + ", frames, height, width]";
  const auto s = check_shape(*a, name.c_str(), {1, C, -1, -1, -1}, want);
  return {host_f32(*a, name.c_str(), cuda), s[2], s[3], s[4]};
}

// [1, C, 2, rt] (ComfyUI's audio latent) -> h3rt's [2, C, rt].
AudioLatent audio_item(const nb::dict& d, const std::string& name, int64_t C, bool cuda) {
  const std::optional<AnyArray> a = array_item(d, "audio_latent", name);
  if (!a) return {};
  const std::string want = "[1, " + std::to_string(C) + ", 2, frames]";
  const int64_t rt = check_shape(*a, name.c_str(), {1, C, 2, -1}, want)[3];
  return {swap_leading_axes(host_f32(*a, name.c_str(), cuda), C, 2, rt), rt};
}

ConditionNoise noise_item(const nb::dict& d, const char* list, size_t i, bool cuda) {
  ConditionNoise n;
  for (const char* key : {"noise", "audio_noise"}) {
    const std::string name = item_name(list, i, key);
    if (const auto a = array_item(d, key, name))
      (key[0] == 'n' ? n.video : n.audio) = host_f32(*a, name.c_str(), cuda);
  }
  return n;
}

nb::dict dict_item(const nb::handle& h, const char* list, size_t i) {
  nb::dict d;
  if (!nb::try_cast(h, d))
    raise_type(std::string(list) + "[" + std::to_string(i) + "]: not a dict");
  return d;
}

ReferenceKind reference_kind(const nb::dict& d, size_t i) {
  const std::string name = item_name("refs", i, "kind");
  if (!d.contains("kind")) raise_value(name + ": missing (image, video, video_audio or audio)");
  const std::string k = nb::cast<std::string>(d["kind"]);
  if (k == "image") return ReferenceKind::image;
  if (k == "video" || k == "video_audio") return ReferenceKind::video;
  if (k == "audio") return ReferenceKind::audio;
  raise_value(name + ": expected image, video, video_audio or audio, got '" + k + "'");
}

FloatVec mask_values(const std::optional<AnyArray>& a, const char* name, int64_t lead, bool cuda) {
  if (!a) return {};
  // Leading axes of size 1 (ComfyUI's [1, 1, ...]) are dropped; `lead` axes must remain.
  int64_t ones = 0;
  while (static_cast<int64_t>(a->ndim()) - ones > lead && a->shape(ones) == 1) ++ones;
  if (static_cast<int64_t>(a->ndim()) - ones != lead)
    raise_value(std::string(name) + ": expected " + std::to_string(lead) +
                " axes after leading 1s, got shape of rank " + std::to_string(a->ndim()));
  return host_f32(*a, name, cuda);
}

}  // namespace

Conditioning conditioning_of(const H3Config& c, const ConditioningArgs& a, int64_t text_len,
                             bool cuda) {
  Conditioning k;
  for (size_t i = 0; i < a.keyframes.size(); ++i) {
    const nb::dict d = dict_item(a.keyframes[i], "keyframes", i);
    KeyframeCond kf;
    const char* fk = d.contains("frame_index") ? "frame_index" : "resolved_frame_index";
    if (!d.contains(fk)) raise_value(item_name("keyframes", i, "frame_index") + ": missing");
    kf.frame_index = nb::cast<int64_t>(d[fk]);
    kf.video = video_item(d, item_name("keyframes", i, "latent"), c.in_channels, cuda);
    kf.audio = audio_item(d, item_name("keyframes", i, "audio_latent"), c.audio_channels, cuda);
    kf.noise = noise_item(d, "keyframes", i, cuda);
    k.keyframes.push_back(std::move(kf));
  }
  for (size_t i = 0; i < a.refs.size(); ++i) {
    const nb::dict d = dict_item(a.refs[i], "refs", i);
    ReferenceCond r;
    r.kind = reference_kind(d, i);
    r.video = video_item(d, item_name("refs", i, "latent"), c.in_channels, cuda);
    r.audio = audio_item(d, item_name("refs", i, "audio_latent"), c.audio_channels, cuda);
    r.noise = noise_item(d, "refs", i, cuda);
    k.refs.push_back(std::move(r));
  }
  if (a.text_tags) {
    const std::vector<int64_t> t = host_ints(*a.text_tags, "text_tags", text_len);
    k.text_tags.assign(t.begin(), t.end());
  }
  k.video_mask = mask_values(a.video_mask, "video_mask", 3, cuda);
  k.audio_mask = mask_values(a.audio_mask, "audio_mask", 2, cuda);
  k.aug = {a.visual_cond_noise_aug, a.audio_cond_noise_aug};
  k.noise_seed = a.noise_seed;
  return k;
}

FloatVec swap_leading_axes(const FloatVec& a, int64_t d0, int64_t d1, int64_t n) {
  FloatVec out(a.size());
  for (int64_t i = 0; i < d0; ++i)
    for (int64_t j = 0; j < d1; ++j)
      for (int64_t k = 0; k < n; ++k) out[(j * d0 + i) * n + k] = a[(i * d1 + j) * n + k];
  return out;
}

FloatVec comfy_audio_to_rows(const FloatVec& a, int64_t C, int64_t N) {
  return audio_latents_to_rows(swap_leading_axes(a, C, 2, N).data(), C, N);
}
FloatVec rows_to_comfy_audio(const FloatVec& rows, int64_t C, int64_t N) {
  return swap_leading_axes(audio_rows_to_latents(rows.data(), C, N), 2, C, N);
}

}  // namespace h3rt::py
