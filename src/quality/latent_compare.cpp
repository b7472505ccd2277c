// Two latent files compared (h3rt compare), and the comparison as JSON and as a table.
#include <cmath>
#include <cstdio>

#include "h3rt/check.h"
#include "h3rt/quality.h"
#include "h3rt/safetensors.h"

namespace h3rt {
namespace {

// Tensor `name` of both files as float32 when both hold it (shapes must agree); false when
// neither does; an error naming the file that lacks it otherwise.
bool read_pair(const SafetensorsFile& a, const SafetensorsFile& b, const std::string& name,
               std::vector<float>& va, std::vector<float>& vb, Shape& shape) {
  const bool in_a = a.contains(name), in_b = b.contains(name);
  if (!in_a && !in_b) return false;
  H3RT_CHECK(in_a && in_b, (in_a ? b : a).path(), " has no tensor '", name, "' and ",
             (in_a ? a : b).path(), " has one: compare latents of the same kind");
  const Tensor ta = a.get(name), tb = b.get(name);
  H3RT_CHECK(ta.shape() == tb.shape(), "tensor '", name, "': ", a.path(), " has shape ",
             shape_str(ta.shape()), ", ", b.path(), " has ", shape_str(tb.shape()));
  for (const auto* f : {&a, &b}) {
    const DType d = f->get(name).dtype();
    H3RT_CHECK(d == DType::f32 || d == DType::bf16 || d == DType::f16, f->path(), ": tensor '",
               name, "' is ", dtype_name(d), ", expected f32, bf16 or f16");
  }
  va = ta.to_f32();
  vb = tb.to_f32();
  shape = ta.shape();
  return true;
}

nlohmann::json json_number(double v) {  // JSON has no infinity: null stands for it
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

nlohmann::json to_json(const Similarity& s) {
  return {{"relative_l2", json_number(s.rel_l2)},
          {"cosine", s.cosine},
          {"psnr_db", json_number(s.psnr_db)},
          {"ssim", s.ssim}};
}

std::string row(const std::string& label, const Similarity& s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%-9s %12.6g %12.8f %10.3f %10.6f\n", label.c_str(), s.rel_l2,
                s.cosine, s.psnr_db, s.ssim);
  return buf;
}

}  // namespace

LatentComparison compare_latent_files(const std::string& path_a, const std::string& path_b) {
  const SafetensorsFile a = SafetensorsFile::open(path_a), b = SafetensorsFile::open(path_b);
  LatentComparison c{path_a, path_b, std::nullopt, std::nullopt};
  std::vector<float> va, vb;
  Shape shape;
  if (read_pair(a, b, "video_latents", va, vb, shape)) {
    const bool ok = (shape.size() == 5 && shape[0] == 1) || shape.size() == 4;
    H3RT_CHECK(ok, path_a, ": tensor 'video_latents' has shape ", shape_str(shape),
               ", expected [1, C, T, Hl, Wl]");
    c.video = compare_video(va.data(), vb.data(), shape);
  }
  if (read_pair(a, b, "audio_latents", va, vb, shape))
    c.audio = compare_audio(va.data(), vb.data(), shape);
  H3RT_CHECK(c.video || c.audio, "neither ", path_a, " nor ", path_b,
             " holds video_latents or audio_latents (the tensors `h3rt sample` writes)");
  return c;
}

nlohmann::json to_json(const LatentComparison& c) {
  nlohmann::json j = {{"reference", c.file_a}, {"test", c.file_b}};
  if (c.video) {
    nlohmann::json frames = nlohmann::json::array();
    for (const Similarity& s : c.video->frames) frames.push_back(to_json(s));
    j["video"] = {{"shape", c.video->shape},
                  {"data_range", c.video->data_range},
                  {"overall", to_json(c.video->overall)},
                  {"frames", frames}};
  }
  if (c.audio)
    j["audio"] = {{"shape", c.audio->shape},
                  {"pearson", c.audio->pearson},
                  {"relative_l2", json_number(c.audio->rel_l2)}};
  return j;
}

std::string format_latent_comparison(const LatentComparison& c) {
  std::string s = "reference " + c.file_a + "\ntest      " + c.file_b + "\n";
  if (c.video) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "video %s, data range %.6g\n", shape_str(c.video->shape).c_str(),
                  c.video->data_range);
    s += buf;
    s += "frame      relative_l2       cosine  psnr_db       ssim\n";
    for (size_t t = 0; t < c.video->frames.size(); ++t)
      s += row(std::to_string(t), c.video->frames[t]);
    s += row("overall", c.video->overall);
  }
  if (c.audio) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "audio %s: pearson %.8f, relative_l2 %.6g\n",
                  shape_str(c.audio->shape).c_str(), c.audio->pearson, c.audio->rel_l2);
    s += buf;
  }
  return s;
}

}  // namespace h3rt
