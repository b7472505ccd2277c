// ComfyUI's per-row timesteps, denoise masks, condition noise augmentation and audio carry, in
// the float64 / float32 arithmetic its Python and torch code uses (conditioning.h).
#include "h3rt/conditioning.h"

#include <algorithm>
#include <map>

#include "h3rt/check.h"

namespace h3rt {
namespace {

constexpr float kMaskOpen = 1.0f - 1e-3f;  // rows at or above it count as fully generated

// Each masked row's timestep, float32: min(1 - m * sigma, pin).
std::vector<float> masked_row_t(const std::vector<float>& m, double sigma, double pin) {
  const float s = static_cast<float>(sigma), p = static_cast<float>(pin);
  std::vector<float> t(m.size());
  for (size_t i = 0; i < m.size(); ++i) t[i] = std::min(1.0f - m[i] * s, p);
  return t;
}

bool all_equal(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [&](float x) { return x == v.front(); });
}

// The float64 timestep of each segment kind (ComfyUI's seg_t).
std::map<SegmentKind, double> kind_times(const EvalTimes& t, const ConditionAug& aug) {
  const double cv = std::max(t.t_video, aug.video), ca = std::max(t.t_audio, aug.audio);
  return {{SegmentKind::text, t.t_video},  {SegmentKind::video, t.t_video},
          {SegmentKind::audio, t.t_audio}, {SegmentKind::cond, cv},
          {SegmentKind::ref_img, cv},      {SegmentKind::cond_audio, ca},
          {SegmentKind::ref_audio, ca}};
}

// Per-row timesteps of a target stream under a mask: empty when unmasked or when every row has
// one value (that value then labels the whole segment through `seg_t`).
std::vector<float> stream_rows_t(const std::vector<float>& mask, int64_t rows, double sigma,
                                 double pin, double& seg_t, const char* what) {
  if (mask.empty()) return {};
  H3RT_CHECK(static_cast<int64_t>(mask.size()) == rows, "conditioned plan: ", what, " mask has ",
             mask.size(), " row values, expected ", rows);
  std::vector<float> t = masked_row_t(mask, sigma, pin);
  if (!all_equal(t)) return t;
  if (!t.empty()) seg_t = t.front();
  return {};
}

}  // namespace

double time_shift_sigma(double sigma, double from_shift, double to_shift) {
  const double base = sigma / (from_shift + sigma * (1.0 - from_shift));
  return to_shift * base / (1.0 + (to_shift - 1.0) * base);
}

EvalTimes comfy_eval_times(float sigma, double shift_video, double shift_audio) {
  const float timestep = sigma * 1000.0f;
  const float sv = std::max(timestep / 1000.0f, 1e-6f);
  EvalTimes t;
  t.sigma_video = sv;
  t.t_video = 1.0 - t.sigma_video;
  t.t_audio = 1.0 - time_shift_sigma(t.sigma_video, shift_video, shift_audio);
  return t;
}

std::vector<float> video_mask_rows(const float* mask, int64_t T, int64_t H, int64_t W) {
  H3RT_CHECK(T > 0 && H > 0 && W > 0 && H % 2 == 0 && W % 2 == 0,
             "video mask: latent T x Hl x Wl must be positive with even Hl, Wl; got ", T, " x ", H,
             " x ", W);
  const int64_t hp = H / 2, wp = W / 2;
  std::vector<float> rows(T * hp * wp);
  bool open = true;
  for (int64_t f = 0; f < T; ++f)
    for (int64_t y = 0; y < hp; ++y)
      for (int64_t x = 0; x < wp; ++x) {
        const float* p = mask + (f * H + 2 * y) * W + 2 * x;
        const float v = std::max(std::max(p[0], p[1]), std::max(p[W], p[W + 1]));
        rows[(f * hp + y) * wp + x] = v;
        open = open && v >= kMaskOpen;
      }
  return open ? std::vector<float>{} : rows;
}

std::vector<float> audio_mask_rows(const float* mask, int64_t len) {
  std::vector<float> rows(mask, mask + 2 * len);
  const bool open = std::all_of(rows.begin(), rows.end(), [](float v) { return v >= kMaskOpen; });
  return open ? std::vector<float>{} : rows;
}

TimestepPlan make_conditioned_plan(const SequenceLayout& l, const EvalTimes& times,
                                   const ConditionAug& aug, const RowMasks& masks) {
  H3RT_CHECK(!l.segments.empty(), "conditioned plan: the layout has no segment table");
  std::map<SegmentKind, double> seg_t = kind_times(times, aug);
  const std::vector<float> video_t = stream_rows_t(masks.video, l.video_rows(), times.sigma_video,
                                                   std::max(times.t_video, kVisualCondTimestep),
                                                   seg_t[SegmentKind::video], "video");
  const std::vector<float> audio_t = stream_rows_t(masks.audio, l.audio_rows(), 1.0 - times.t_audio,
                                                   std::max(times.t_audio, kAudioCondTimestep),
                                                   seg_t[SegmentKind::audio], "audio");

  std::vector<double> values = {times.t_video, times.t_audio};
  for (const Segment& s : l.segments) values.push_back(seg_t[s.kind]);
  values.insert(values.end(), video_t.begin(), video_t.end());
  values.insert(values.end(), audio_t.begin(), audio_t.end());
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());

  TimestepPlan plan;
  plan.values = values;
  for (double v : values) plan.timestep.push_back(static_cast<float>(v));
  auto index_of = [&](double t) {
    return static_cast<int64_t>(std::lower_bound(values.begin(), values.end(), t) - values.begin());
  };
  plan.timestep_indices.assign(l.seq_len(), 0);
  for (const Segment& s : l.segments) {
    const std::vector<float>& rows_t = s.kind == SegmentKind::video   ? video_t
                                       : s.kind == SegmentKind::audio ? audio_t
                                                                      : std::vector<float>{};
    for (int64_t r = s.start; r < s.stop; ++r)
      plan.timestep_indices[r] = index_of(rows_t.empty() ? seg_t[s.kind] : rows_t[r - s.start]);
  }
  return plan;
}

void apply_video_mask(float* v, const float* mask, int64_t C, int64_t T, int64_t H, int64_t W) {
  const int64_t hp = H / 2, wp = W / 2;
  for (int64_t f = 0; f < T; ++f)
    for (int64_t y = 0; y < hp; ++y)
      for (int64_t x = 0; x < wp; ++x) {
        float* row = v + ((f * hp + y) * wp + x) * C * 4;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t iy = 0; iy < 2; ++iy)
            for (int64_t ix = 0; ix < 2; ++ix)
              row[(c * 2 + iy) * 2 + ix] *= mask[(f * H + 2 * y + iy) * W + 2 * x + ix];
      }
}

void apply_audio_mask(float* v, const float* mask, int64_t C, int64_t len) {
  for (int64_t r = 0; r < 2 * len; ++r)
    for (int64_t c = 0; c < C; ++c) v[r * C + c] *= mask[r];
}

void augment_condition_rows(float* rows, const float* noise, int64_t n, double aug) {
  if (aug >= 1.0) return;
  const float a = static_cast<float>(aug), b = static_cast<float>(1.0 - aug);
  for (int64_t i = 0; i < n; ++i) {
    const float x = a * rows[i];
    const float y = b * noise[i];
    rows[i] = x + y;
  }
}

AudioCarry audio_carry(float sigma, float scale, float shift_video, float shift_audio) {
  AudioCarry c;
  c.scale = scale;
  c.sigma_video = std::max((sigma * 1000.0f) / 1000.0f, 1e-6f);
  const float sv = c.sigma_video;
  const float base = sv / (shift_video + sv * (1.0f - shift_video));
  c.sigma_audio = (shift_audio * base) / (1.0f + (shift_audio - 1.0f) * base);
  c.carry = c.sigma_audio / sv;
  return c;
}

void carry_audio_input(float* x, int64_t n, const AudioCarry& c) {
  for (int64_t i = 0; i < n; ++i) x[i] *= c.carry;
}

void carry_audio_output(float* v, const float* x_net, int64_t n, const AudioCarry& c) {
  const float a = static_cast<float>(1.0 - static_cast<double>(c.scale));
  const float k = 1.0f + static_cast<float>(static_cast<double>(c.scale) - 1.0) * c.sigma_audio;
  for (int64_t i = 0; i < n; ++i) {
    const float x = a * x_net[i];
    const float y = k * -v[i];
    v[i] = -(x + y);
  }
}

}  // namespace h3rt
