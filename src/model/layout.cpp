// The packed t2va sequence: [text (L) | audio (2N) | video (T*(Hl/2)*(Wl/2))].
// Positions follow the reference pipeline's float64 arithmetic operation for operation, so
// that `position_ids` matches it bit for bit (README sections 3-4).
#include "h3rt/layout.h"

#include <algorithm>
#include <cmath>

#include "h3rt/check.h"

namespace h3rt {
namespace {

constexpr int64_t kPatch = 2;  // spatial patch (ph = pw = 2); the temporal patch is 1

// Latent-frame time spans in units of audio latents: frame f adds (5/3)*P[f mod 5].
constexpr double kFrameSpan[5] = {1.0, 4.0, 4.0, 4.0, 4.0};

// tf[f] = L + cumsum(spans)[f], the cumulative sum formed from 0 first and L added last:
// adding L before accumulating rounds differently at the last bit.
std::vector<double> frame_times(int64_t text_len, int64_t frames) {
  std::vector<double> t(frames);
  double acc = 0.0;
  for (int64_t f = 0; f < frames; ++f) {
    t[f] = static_cast<double>(text_len) + acc;
    acc += (5.0 / 3.0) * kFrameSpan[f % 5];
  }
  return t;
}

// numpy linspace(left, left + ratio, n, endpoint=False) * 32, keeping the (left+ratio)-left
// form of the interval, which is not always exactly `ratio`.
std::vector<double> spatial_axis(int64_t len, double sqrt_area) {
  const double ratio = static_cast<double>(len) / sqrt_area;
  const double left = (1.0 - ratio) / 2.0;
  const int64_t n = len / kPatch;
  const double step = ((left + ratio) - left) / static_cast<double>(n);
  std::vector<double> c(n);
  for (int64_t i = 0; i < n; ++i) c[i] = (static_cast<double>(i) * step + left) * 32.0;
  return c;
}

void set_pos(std::vector<double>& pos, int64_t row, double t, double h, double w) {
  pos[3 * row + 0] = t;
  pos[3 * row + 1] = h;
  pos[3 * row + 2] = w;
}

}  // namespace

SequenceLayout make_t2va_layout(int64_t text_len, int64_t audio_len, int64_t frames, int64_t height,
                                int64_t width) {
  H3RT_CHECK(text_len >= 0 && audio_len >= 0, "layout: negative text (", text_len, ") or audio (",
             audio_len, ") length");
  H3RT_CHECK(frames > 0 && height > 0 && width > 0 && height % kPatch == 0 && width % kPatch == 0,
             "layout: video latent T x Hl x Wl must be positive with even Hl, Wl; got ", frames,
             " x ", height, " x ", width);
  SequenceLayout lay;
  lay.text_len = text_len;
  lay.audio_len = audio_len;
  lay.frames = frames;
  lay.height = height;
  lay.width = width;
  const int64_t S = lay.seq_len(), L = text_len, A = lay.audio_rows();

  lay.token_tags.assign(S, kTagVideo);
  lay.position_ids.assign(3 * S, 0.0);
  for (int64_t i = 0; i < L; ++i) {
    lay.text_indices.push_back(i);
    lay.token_tags[i] = kTagText;
    set_pos(lay.position_ids, i, static_cast<double>(i), 0.0, 0.0);
  }

  const double sqrt_area = std::sqrt(static_cast<double>(height * width));
  const std::vector<double> hy = spatial_axis(height, sqrt_area);
  const std::vector<double> wx = spatial_axis(width, sqrt_area);
  const std::vector<double> tf = frame_times(L, frames);

  for (int64_t ch = 0; ch < 2; ++ch) {
    const double w = ch == 0 ? wx.front() : wx.back();
    for (int64_t j = 0; j < audio_len; ++j) {
      const int64_t r = L + ch * audio_len + j;
      lay.audio_indices.push_back(r);
      lay.token_tags[r] = kTagAudio;
      set_pos(lay.position_ids, r, static_cast<double>(L + j), 0.0, w);
    }
  }

  lay.segments = {
      {0, L, SegmentKind::text}, {L, L + A, SegmentKind::audio}, {L + A, S, SegmentKind::video}};
  int64_t r = L + A;
  for (int64_t f = 0; f < frames; ++f)
    for (size_t y = 0; y < hy.size(); ++y)
      for (size_t x = 0; x < wx.size(); ++x, ++r) {
        lay.video_indices.push_back(r);
        set_pos(lay.position_ids, r, tf[f], hy[y], wx[x]);
      }
  return lay;
}

TimestepPlan make_timestep_plan(const SequenceLayout& layout, float t_video, float t_audio) {
  TimestepPlan plan;
  plan.timestep.push_back(t_video);
  if (layout.audio_rows() > 0) plan.timestep.push_back(t_audio);
  std::sort(plan.timestep.begin(), plan.timestep.end());
  plan.timestep.erase(std::unique(plan.timestep.begin(), plan.timestep.end()), plan.timestep.end());
  auto index_of = [&](float t) {
    return static_cast<int64_t>(std::lower_bound(plan.timestep.begin(), plan.timestep.end(), t) -
                                plan.timestep.begin());
  };
  const int64_t iv = index_of(t_video), ia = index_of(t_audio);
  plan.timestep_indices.resize(layout.seq_len());
  for (int64_t r = 0; r < layout.seq_len(); ++r)
    plan.timestep_indices[r] = layout.token_tags[r] == kTagAudio ? ia : iv;
  return plan;
}

std::vector<int64_t> adaln_indices(const SequenceLayout& layout, const TimestepPlan& plan) {
  const int64_t S = layout.seq_len();
  H3RT_CHECK(static_cast<int64_t>(plan.timestep_indices.size()) == S &&
                 static_cast<int64_t>(layout.token_tags.size()) == S,
             "adaln_indices: timestep_indices (", plan.timestep_indices.size(),
             ") and token_tags (", layout.token_tags.size(), ") must both have S = ", S, " rows");
  std::vector<int64_t> a(S);
  for (int64_t r = 0; r < S; ++r) a[r] = plan.timestep_indices[r] * 3 + layout.token_tags[r];
  return a;
}

std::vector<ModSegment> mod_segments(const SequenceLayout& layout, const TimestepPlan& plan) {
  const std::vector<int64_t> a = adaln_indices(layout, plan);
  H3RT_CHECK(!layout.segments.empty(), "mod_segments: the layout has no segment table");
  std::vector<ModSegment> out;
  for (const Segment& s : layout.segments) {
    if (s.kind == SegmentKind::text) {  // runs of equal row (vision-block tokens read row tag 0)
      for (int64_t i = s.start; i < s.stop;) {
        int64_t j = i + 1;
        while (j < s.stop && a[j] == a[i]) ++j;
        out.push_back({i, j, a[i]});
        i = j;
      }
      continue;
    }
    if (s.stop == s.start) continue;  // no rows, no row to name
    const bool uniform = std::all_of(a.begin() + s.start, a.begin() + s.stop,
                                     [&](int64_t v) { return v == a[s.start]; });
    out.push_back({s.start, s.stop, uniform ? a[s.start] : -1});
  }
  return out;
}

// Row (f, y, x) = (f*(Hl/2) + y)*(Wl/2) + x; feature (c, iy, ix) = (c*2 + iy)*2 + ix.
// `to_rows` selects the direction; both directions visit the same (latent, row) pairs.
static void patch_map(const float* src, float* dst, int64_t C, int64_t T, int64_t H, int64_t W,
                      bool to_rows) {
  H3RT_CHECK(C > 0 && T > 0 && H % kPatch == 0 && W % kPatch == 0 && H > 0 && W > 0,
             "patchify: latent [C, T, Hl, Wl] needs positive sizes and even Hl, Wl; got [", C, ", ",
             T, ", ", H, ", ", W, "]");
  const int64_t hp = H / kPatch, wp = W / kPatch, F = C * kPatch * kPatch;
  for (int64_t f = 0; f < T; ++f)
    for (int64_t y = 0; y < hp; ++y)
      for (int64_t x = 0; x < wp; ++x) {
        const int64_t row = (f * hp + y) * wp + x;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t iy = 0; iy < kPatch; ++iy)
            for (int64_t ix = 0; ix < kPatch; ++ix) {
              const int64_t feat = (c * kPatch + iy) * kPatch + ix;
              const int64_t lat = ((c * T + f) * H + y * kPatch + iy) * W + x * kPatch + ix;
              if (to_rows)
                dst[row * F + feat] = src[lat];
              else
                dst[lat] = src[row * F + feat];
            }
      }
}

FloatVec patchify_video(const float* latents, int64_t channels, int64_t frames, int64_t height,
                        int64_t width) {
  FloatVec rows(channels * frames * height * width);
  patch_map(latents, rows.data(), channels, frames, height, width, true);
  return rows;
}

FloatVec unpatchify_video(const float* rows, int64_t channels, int64_t frames, int64_t height,
                          int64_t width) {
  FloatVec lat(channels * frames * height * width);
  patch_map(rows, lat.data(), channels, frames, height, width, false);
  return lat;
}

// Latent [2, C, N] <-> rows [2N, C]: rows[ch*N + j][c] = latent[ch][c][j].
FloatVec audio_latents_to_rows(const float* latents, int64_t channels, int64_t len) {
  FloatVec rows(2 * channels * len);
  for (int64_t ch = 0; ch < 2; ++ch)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t j = 0; j < len; ++j)
        rows[(ch * len + j) * channels + c] = latents[(ch * channels + c) * len + j];
  return rows;
}

FloatVec audio_rows_to_latents(const float* rows, int64_t channels, int64_t len) {
  FloatVec lat(2 * channels * len);
  for (int64_t ch = 0; ch < 2; ++ch)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t j = 0; j < len; ++j)
        lat[(ch * channels + c) * len + j] = rows[(ch * len + j) * channels + c];
  return lat;
}

}  // namespace h3rt
