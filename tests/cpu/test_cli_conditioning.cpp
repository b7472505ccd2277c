// `h3rt forward` and `h3rt sample` with conditioning from an inputs file in the documented names
// (README "Inputs files"): golden cases written out in that format reproduce ComfyUI's
// velocities through the binary; sampling with keyframes runs; bad files fail with one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "comfy_golden.h"
#include "h3rt/formats.h"
#include "h3rt/safetensors.h"

namespace h3rt {
namespace {

using test::run_cli;

std::string tmp(const std::string& name) {
  static const test::TempDir dir("h3rt_cli_cond_tests");
  return dir.file(name);
}

Tensor f32(const FloatVec& v, Shape s) {
  return tensor_from_f32(std::vector<float>(v.begin(), v.end()), std::move(s));
}

// One condition's latents and noise under <prefix>/<i>/.
void add_latents(NamedTensors& t, const std::string& p, const VideoLatent& v, const AudioLatent& a,
                 const ConditionNoise& n) {
  if (!v.empty()) t.push_back({p + "video", f32(v.data, {1, 24, v.frames, v.height, v.width})});
  if (!a.empty()) t.push_back({p + "audio", f32(a.data, {2, 32, a.len})});
  if (!n.video.empty())
    t.push_back({p + "video_noise", f32(n.video, {int64_t(n.video.size()) / 96, 96})});
  if (!n.audio.empty())
    t.push_back({p + "audio_noise", f32(n.audio, {int64_t(n.audio.size()) / 32, 32})});
}

// A golden case as an h3rt inputs file.
std::string write_inputs(const test::ComfyCase& c) {
  const Conditioning& k = c.request.conditioning;
  NamedTensors t;
  std::map<std::string, std::string> meta;
  for (const char* n : {"input/text_embeds", "input/video_latents", "input/audio_latents"})
    t.push_back({n, c.file.get(n)});
  for (size_t i = 0; i < k.keyframes.size(); ++i) {
    const std::string p = "keyframe/" + std::to_string(i) + "/";
    add_latents(t, p, k.keyframes[i].video, k.keyframes[i].audio, k.keyframes[i].noise);
    meta[p + "frame_index"] = std::to_string(k.keyframes[i].frame_index);
  }
  for (size_t i = 0; i < k.refs.size(); ++i) {
    const std::string p = "ref/" + std::to_string(i) + "/";
    add_latents(t, p, k.refs[i].video, k.refs[i].audio, k.refs[i].noise);
    meta[p + "kind"] = reference_kind_name(k.refs[i].kind);
  }
  Tensor tags = Tensor::zeros(DType::i64, {int64_t(k.text_tags.size())});
  std::copy(k.text_tags.begin(), k.text_tags.end(), tags.ptr<int64_t>());
  t.push_back({"input/text_token_tags", tags});
  if (!k.audio_mask.empty())
    t.push_back({"input/audio_denoise_mask", f32(k.audio_mask, {2, c.request.layout.audio_len})});
  meta["visual_cond_noise_aug"] = std::to_string(k.aug.video);
  meta["audio_cond_noise_aug"] = std::to_string(k.aug.audio);
  const std::string path = tmp(c.name + "_inputs.safetensors");
  write_safetensors(path, t, meta);
  return path;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::fabs(double(a[i]) - b[i]));
    den = std::max(den, std::fabs(double(b[i])));
  }
  return num / den;
}

std::string sigma_str(float s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", s);
  return b;
}

const H3Config& config() {
  static const H3Config c = infer_config(SafetensorsFile::open(test::comfy_weights_path()));
  return c;
}

TEST(CliConditioning, ForwardFromInputsFileMatchesComfyGolden) {
  for (const char* name : {"fl2va_first_last", "fl2va_av_aug", "ref2va_mixed", "audio_mask"}) {
    SCOPED_TRACE(name);
    const test::ComfyCase c(name, config());
    const std::string in = write_inputs(c), out = tmp(std::string(name) + "_out.safetensors");
    const test::CliRun r =
        run_cli("forward --checkpoint " + test::comfy_weights_path() + " --inputs " + in +
                " --sigma " + sigma_str(c.sigma) + " --out " + out);
    ASSERT_EQ(r.status, 0) << r.output;
    const SafetensorsFile f = SafetensorsFile::open(out);
    ASSERT_EQ(f.get("video_velocity").shape(), c.file.get("video_velocity").shape());
    EXPECT_LE(rel_err(f.get("video_velocity").to_f32(), c.f32("video_velocity")), 1e-5);
    EXPECT_LE(rel_err(f.get("audio_velocity").to_f32(), c.f32("audio_velocity")), 1e-5);
  }
}

TEST(CliConditioning, SampleWithKeyframeFileRuns) {
  const test::ComfyCase c("fl2va_first", config());
  // A conditioning file alone (no input/* target): one keyframe on the tiny preset's 8 x 8 grid.
  const KeyframeCond& kf = c.request.conditioning.keyframes.at(0);
  NamedTensors t = {{"keyframe/0/video", f32(kf.video.data, {1, 24, 1, 8, 8})}};
  const std::string cond = tmp("kf.safetensors"), out = tmp("kf_out.safetensors");
  write_safetensors(cond, t, {{"keyframe/0/frame_index", "0"}});
  const test::CliRun r = run_cli(
      "sample --width 128 --height 128 --frames 17 --steps 2 "
      "--conditioning " +
      cond + " --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const Tensor v = SafetensorsFile::open(out).get("video_latents");
  EXPECT_EQ(v.shape(), (Shape{1, 24, 5, 8, 8}));
  for (float x : v.to_f32()) ASSERT_TRUE(std::isfinite(x));
}

TEST(CliConditioning, BadConditioningFilesFailWithOneLine) {
  const std::string bad = tmp("bad.safetensors"), out = tmp("bad_out.safetensors");
  auto expect_error = [&](const std::string& needle) {
    const test::CliRun r = run_cli(
        "sample --width 128 --height 128 --frames 17 --steps 1 "
        "--conditioning " +
        bad + " --out " + out);
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
  };
  const Tensor kf = tensor_from_f32(std::vector<float>(24 * 64, 0.5f), {1, 24, 1, 8, 8});
  write_safetensors(bad, {{"keyframe/0/video", kf}}, {});
  expect_error("keyframe/0/frame_index' is missing");
  write_safetensors(bad, {{"keyframe/1/video", kf}}, {{"keyframe/1/frame_index", "0"}});
  expect_error("without gaps");
  write_safetensors(bad, {{"ref/0/video", kf}}, {{"ref/0/kind", "picture"}});
  expect_error("expected image, video or audio");
  const Tensor wrong = tensor_from_f32(std::vector<float>(24 * 48, 0.5f), {1, 24, 1, 8, 6});
  write_safetensors(bad, {{"keyframe/0/video", wrong}}, {{"keyframe/0/frame_index", "0"}});
  expect_error("expected the target's 8 x 8");
  const Tensor mask = tensor_from_f32(std::vector<float>(2 * 29, 0.0f), {2, 29});
  write_safetensors(bad, {{"keyframe/0/video", kf}, {"input/audio_denoise_mask", mask}},
                    {{"keyframe/0/frame_index", "0"}});
  expect_error("use scheduler simple (--scheduler simple)");
}

}  // namespace
}  // namespace h3rt
