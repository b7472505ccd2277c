// A case of the h3_tiny_comfy golden format (../shared/golden/h3_tiny_comfy/README.md), turned
// into an h3rt request from the file alone: the case's metadata (the manifest entry) gives the
// payload, the tensors give the latents and the condition noise ComfyUI drew. Shared by the CPU
// golden test and the GPU tests. H3RT_COMFY_GOLDEN_DIR points at another set of the same format.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "h3rt/pipeline.h"
#include "h3rt/safetensors.h"
#include "test_util.h"

namespace h3rt::test {

inline std::string comfy_golden_dir() {
  if (const char* env = std::getenv("H3RT_COMFY_GOLDEN_DIR")) return env;
  return shared_dir() + "/golden/h3_tiny_comfy";
}

inline nlohmann::json comfy_manifest() {
  std::ifstream in(comfy_golden_dir() + "/manifest.json");
  return nlohmann::json::parse(in);
}

inline std::vector<std::string> comfy_case_names() {
  std::vector<std::string> names;
  const nlohmann::json m = comfy_manifest();  // outlives the loop over its items
  for (const auto& [name, entry] : m["cases"].items()) names.push_back(name);
  return names;
}

// The set's weights: the manifest's path ("shared/golden/..." is under the shared folder), or a
// weights.safetensors beside the cases.
inline std::string comfy_weights_path() {
  const std::string p = comfy_manifest()["set"]["weights"];
  const std::string under_shared = p.rfind("shared/", 0) == 0 ? p.substr(7) : p;
  const std::filesystem::path a = std::filesystem::path(shared_dir()) / under_shared;
  if (std::filesystem::exists(a)) return a.string();
  return comfy_golden_dir() + "/weights.safetensors";
}

struct ComfyCase {
  std::string name;
  SafetensorsFile file;
  nlohmann::json meta;  // the manifest entry
  float sigma = 0;
  float audio_scale = 1;
  Request request;

  ComfyCase(const std::string& case_name, const H3Config& config)
      : name(case_name),
        file(SafetensorsFile::open(comfy_golden_dir() + "/" + case_name + ".safetensors")) {
    meta = nlohmann::json::parse(file.metadata().at("case"));
    sigma = file.get("input/sigma_video").to_f32()[0];
    const nlohmann::json& p = meta["payload"];
    if (p.contains("audio_scale")) audio_scale = p["audio_scale"].get<float>();
    request = target_request(config);
    condition_request(request, config, conditioning(config));
  }

  std::vector<float> f32(const std::string& n) const { return file.get(n).to_f32(); }
  std::vector<double> f64(const std::string& n) const { return file.get(n).to_f64(); }
  std::vector<int64_t> ints(const std::string& n) const {
    const std::vector<double> d = f64(n);
    return std::vector<int64_t>(d.begin(), d.end());
  }

 private:
  static FloatVec fv(const std::vector<float>& v) { return FloatVec(v.begin(), v.end()); }

  // "cond/audio_latent_0 (as [1,32,2,rt])" -> "cond/audio_latent_0"
  static std::string tensor_name(const nlohmann::json& j) {
    const std::string s = j.get<std::string>();
    return s.substr(0, s.find(' '));
  }
  static std::string noise_name(const std::string& latent) {
    std::string n = latent;
    n.replace(n.find("_latent_"), 8, "_noise_");
    return n;
  }

  Request target_request(const H3Config& c) const {
    const Tensor v = file.get("input/video_latents");
    const Tensor a = file.get("input/audio_latents");
    const Tensor t = file.get("input/text_embeds");
    Request r;
    r.layout = make_t2va_layout(t.size(1), a.size(2), v.size(2), v.size(3), v.size(4));
    const std::vector<float> vl = v.to_f32(), al = a.to_f32();
    r.video_rows = patchify_video(vl.data(), c.in_channels, v.size(2), v.size(3), v.size(4));
    r.audio_rows = audio_latents_to_rows(al.data(), c.audio_channels, a.size(2));
    r.text = fv(t.to_f32());
    return r;
  }

  VideoLatent video(const nlohmann::json& j, ConditionNoise& noise) const {
    if (j.is_null()) return {};
    const std::string n = tensor_name(j);
    const Tensor t = file.get(n);  // [1, 24, vt, h, w]
    if (file.contains(noise_name(n))) noise.video = fv(file.get(noise_name(n)).to_f32());
    return {fv(t.to_f32()), t.size(2), t.size(3), t.size(4)};
  }
  AudioLatent audio(const nlohmann::json& j, ConditionNoise& noise) const {
    if (j.is_null()) return {};
    const std::string n = tensor_name(j);
    const Tensor t = file.get(n);  // [2, 32, rt]
    if (file.contains(noise_name(n))) noise.audio = fv(file.get(noise_name(n)).to_f32());
    return {fv(t.to_f32()), t.size(2)};
  }

  static double aug_value(const nlohmann::json& p, const char* key, double fallback) {
    return p.contains(key) && p[key].is_number() ? p[key].get<double>() : fallback;
  }

  Conditioning conditioning(const H3Config&) const {
    const nlohmann::json& p = meta["payload"];
    Conditioning c;
    if (p.contains("keyframes"))
      for (const auto& k : p["keyframes"]) {
        KeyframeCond kf;
        kf.frame_index = k["resolved_frame_index"].get<int64_t>();
        kf.video = video(k.value("latent", nlohmann::json()), kf.noise);
        kf.audio = audio(k.value("audio_latent", nlohmann::json()), kf.noise);
        c.keyframes.push_back(std::move(kf));
      }
    if (p.contains("refs"))
      for (const auto& r : p["refs"]) {
        ReferenceCond rc;
        const std::string kind = r["kind"];
        rc.kind = kind == "image"   ? ReferenceKind::image
                  : kind == "audio" ? ReferenceKind::audio
                                    : ReferenceKind::video;
        rc.video = video(r.value("latent", nlohmann::json()), rc.noise);
        rc.audio = audio(r.value("audio_latent", nlohmann::json()), rc.noise);
        c.refs.push_back(std::move(rc));
      }
    if (file.contains("input/text_token_tags"))
      for (double t : file.get("input/text_token_tags").to_f64())
        c.text_tags.push_back(static_cast<int32_t>(t));
    c.aug.video = aug_value(p, "visual_cond_noise_aug", kVisualCondTimestep);
    c.aug.audio = aug_value(p, "audio_cond_noise_aug", kAudioCondTimestep);
    if (file.contains("input/audio_denoise_mask"))
      c.audio_mask = fv(file.get("input/audio_denoise_mask").to_f32());
    return c;
  }
};

}  // namespace h3rt::test
