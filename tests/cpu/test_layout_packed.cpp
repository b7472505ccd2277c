// The general packed layout and its per-row timesteps on small shapes, against numbers worked out
// from ComfyUI's formulas (comfy/ldm/minimax/model.py PackedLayout, _forward; the formula is
// written beside each expected value). The golden cases (test_comfy_golden.cpp) check the same
// code against ComfyUI's own output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "h3rt/check.h"
#include "h3rt/conditioning.h"
#include "h3rt/layout.h"
#include "test_util.h"

namespace h3rt {
namespace {

using test::bits;

struct Pos {
  double t, h, w;
};
Pos pos(const SequenceLayout& l, int64_t r) {
  return {l.position_ids[3 * r], l.position_ids[3 * r + 1], l.position_ids[3 * r + 2]};
}
void expect_pos(const SequenceLayout& l, int64_t r, double t, double h, double w) {
  const Pos p = pos(l, r);
  EXPECT_EQ(p.t, t) << "row " << r << " t";
  EXPECT_EQ(p.h, h) << "row " << r << " h";
  EXPECT_EQ(p.w, w) << "row " << r << " w";
}

std::vector<Segment> segs(std::initializer_list<Segment> s) {
  return s;
}

// Target: L = 3 text tokens, T = 2 latent frames of 4 x 4 (a 2 x 2 patch grid), N = 2 audio
// latents. A square latent: ratio = 4 / sqrt(16) = 1, n = 2, coord = (i * 0.5 + 0) * 32 = 0, 16.
LayoutSpec target(int64_t L = 3, int64_t T = 2, int64_t N = 2) {
  LayoutSpec s;
  s.text_len = L;
  s.audio_len = N;
  s.frames = T;
  s.height = s.width = 4;
  return s;
}

// t_v = 0.25, t_a = 0.5 (sigma_v = 0.75): exact in float32, so the table values are plain.
const EvalTimes kTimes{0.75, 0.25, 0.5};

TEST(LayoutPacked, T2vaSegmentsPositionsAndTimesteps) {
  const SequenceLayout l = make_layout(target());
  EXPECT_EQ(
      l.segments,
      segs({{0, 3, SegmentKind::text}, {3, 7, SegmentKind::audio}, {7, 15, SegmentKind::video}}));
  expect_pos(l, 2, 2, 0, 0);   // text row i: (i, 0, 0)
  expect_pos(l, 3, 3, 0, 0);   // audio ch 0, j = 0: (c0 + j, 0, w_first), c0 = L = 3
  expect_pos(l, 6, 4, 0, 16);  // audio ch 1, j = 1: (3 + 1, 0, w_last = 16)
  expect_pos(l, 7, 3, 0, 0);   // video frame 0 row (0, 0): (c0, h0, w0)
  expect_pos(l, 10, 3, 16, 16);
  expect_pos(l, 11, 3 + 5.0 / 3.0 * 1, 0, 0);  // frame 1: c0 + span(frame 0) = 3 + 5/3 * 1
  const SequenceLayout ref = make_t2va_layout(3, 2, 2, 4, 4);
  EXPECT_EQ(l.position_ids, ref.position_ids);  // square latents: both forms are exact
  EXPECT_EQ(l.token_tags, ref.token_tags);

  const TimestepPlan p = make_conditioned_plan(l, kTimes);
  EXPECT_EQ(p.values, (std::vector<double>{0.25, 0.5}));  // sorted {t_v, t_a}
  EXPECT_EQ(adaln_indices(l, p)[0], 0 * 3 + 1);           // text: t_v, tag 1
  EXPECT_EQ(adaln_indices(l, p)[3], 1 * 3 + 2);           // audio: t_a, tag 2
  EXPECT_EQ(adaln_indices(l, p)[7], 0 * 3 + 0);           // video: t_v, tag 0
  EXPECT_EQ(mod_segments(l, p), (std::vector<ModSegment>{{0, 3, 1}, {3, 7, 5}, {7, 15, 0}}));
}

TEST(LayoutPacked, Fl2vaFirstFrame) {
  LayoutSpec s = target();
  s.keyframes = {{0, 1, 0}};  // MiniMaxH3ImageToVideo(first_frame): an image at pixel frame 0
  const SequenceLayout l = make_layout(s);
  EXPECT_EQ(l.segments, segs({{0, 3, SegmentKind::text},
                              {3, 7, SegmentKind::cond},
                              {7, 11, SegmentKind::audio},
                              {11, 19, SegmentKind::video}}));
  EXPECT_EQ(l.cond_video_indices, (std::vector<int64_t>{3, 4, 5, 6}));
  expect_pos(l, 3, 3, 0, 0);    // cond_t = c0 + 5/3 * 0 = 3, target grid
  expect_pos(l, 6, 3, 16, 16);  // last patch of the keyframe
  expect_pos(l, 7, 3, 0, 0);    // target audio still starts at c0 = L
  EXPECT_EQ(l.token_tags[3], kTagVideo);

  const TimestepPlan p = make_conditioned_plan(l, kTimes);
  EXPECT_EQ(p.values, (std::vector<double>{0.25, 0.5, 0.999}));  // cond: max(t_v, 0.999)
  EXPECT_EQ(bits(p.timestep[2]), 0x3f7fbe77u);                   // float32(0.999)
  EXPECT_EQ(adaln_indices(l, p)[3], 2 * 3 + 0);
  EXPECT_EQ(mod_segments(l, p),
            (std::vector<ModSegment>{{0, 3, 1}, {3, 7, 6}, {7, 11, 5}, {11, 19, 0}}));
  // t_v above the pin: the keyframe rows take t_v (one table row for text, cond and video).
  const TimestepPlan late = make_conditioned_plan(l, {0.0005, 0.9995, 0.999});
  EXPECT_EQ(late.values, (std::vector<double>{0.999, 0.9995}));
  EXPECT_EQ(adaln_indices(l, late)[3], adaln_indices(l, late)[11]);
}

TEST(LayoutPacked, Fl2vaFirstAndLastFrameWithVisionTags) {
  LayoutSpec s = target();
  // frame_count = sum over k < T of (1,4,4,4,4)[k] = 1 + 4 = 5: the last keyframe at pixel 4.
  s.keyframes = {{0, 1, 0}, {4, 1, 0}};
  s.text_tags = {1, 0, 1};  // a vision block in the middle of the text
  const SequenceLayout l = make_layout(s);
  EXPECT_EQ(l.segments[2], (Segment{7, 11, SegmentKind::cond}));
  expect_pos(l, 7, 3 + 5.0 / 3.0 * 4, 0, 0);  // cond_t = c0 + FRAME_RESCALE * 4 = 9.6667
  expect_pos(l, 19, 3 + 5.0 / 3.0, 0, 0);     // target frame 1: c0 + 5/3 (before the keyframe)
  EXPECT_EQ(l.token_tags[1], kTagVideo);      // the vision token is tagged video
  const TimestepPlan p = make_conditioned_plan(l, kTimes);
  // The text span splits into tag runs; the vision token reads the video row at t_v.
  EXPECT_EQ(mod_segments(l, p),
            (std::vector<ModSegment>{
                {0, 1, 1}, {1, 2, 0}, {2, 3, 1}, {3, 7, 6}, {7, 11, 6}, {11, 15, 5}, {15, 23, 0}}));
}

TEST(LayoutPacked, Fl2vaKeyframeWithAudio) {
  LayoutSpec s = target();
  s.keyframes = {{2, 1, 1}};  // AddGuide: an image and one audio latent at pixel frame 2
  const SequenceLayout l = make_layout(s);
  EXPECT_EQ(l.segments[2], (Segment{7, 9, SegmentKind::cond_audio}));
  EXPECT_EQ(l.cond_audio_indices, (std::vector<int64_t>{7, 8}));
  const double t = 3 + 5.0 / 3.0 * 2;  // cond_t = 6.3333
  expect_pos(l, 3, t, 0, 0);
  expect_pos(l, 7, t + 0, 0, 0);   // keyframe audio ch 0: (cond_t + j, 0, target w_first)
  expect_pos(l, 8, t + 0, 0, 16);  // ch 1: target w_last
  const TimestepPlan p = make_conditioned_plan(l, kTimes, {0.999, 1.0});
  EXPECT_EQ(p.values, (std::vector<double>{0.25, 0.5, 0.999, 1.0}));  // cond_audio: max(t_a, 1)
  EXPECT_EQ(adaln_indices(l, p)[7], 3 * 3 + 2);
}

TEST(LayoutPacked, Ref2vaImageVideoAndAudioReferences) {
  LayoutSpec s = target(2, 1, 1);  // L = 2, T = 1, N = 1
  s.refs = {{ReferenceKind::image, 1, 2, 4, 0},
            {ReferenceKind::video, 2, 4, 4, 3},
            {ReferenceKind::audio, 0, 0, 0, 2}};
  const SequenceLayout l = make_layout(s);
  EXPECT_EQ(l.segments, segs({{0, 2, SegmentKind::text},
                              {2, 4, SegmentKind::ref_img},      // image 2 x 4: 1 x 2 patches
                              {4, 10, SegmentKind::ref_audio},   // the clip's soundtrack, 2 * 3
                              {10, 18, SegmentKind::ref_img},    // the clip: 2 frames of 2 x 2
                              {18, 22, SegmentKind::ref_audio},  // standalone audio, 2 * 2
                              {22, 24, SegmentKind::audio},
                              {24, 28, SegmentKind::video}}));
  // Image 2 x 4: sqrt_area = sqrt(8); h: ratio = 2 / sqrt(8), n = 1; w: ratio = 4 / sqrt(8), n = 2.
  const double rh = 2 / std::sqrt(8.0), rw = 4 / std::sqrt(8.0);
  expect_pos(l, 2, 2, (0 * (rh / 1) + (1 - rh) / 2) * 32, (0 * (rw / 2) + (1 - rw) / 2) * 32);
  expect_pos(l, 3, 2, (0 * (rh / 1) + (1 - rh) / 2) * 32, (1 * (rw / 2) + (1 - rw) / 2) * 32);
  // = (2, 4.68629, -6.62742) and (2, 4.68629, 15.99999...): every image row at t = cursor = L.
  // The clip starts at cursor = L + 1 = 3: soundtrack (3 + j, 0, its own grid's w 0 / 16),
  // frames at 3 and 3 + 5/3.
  expect_pos(l, 4, 3, 0, 0);
  expect_pos(l, 9, 3 + 2, 0, 16);
  expect_pos(l, 10, 3, 0, 0);
  expect_pos(l, 14, 3 + 5.0 / 3.0, 0, 0);
  // cursor += max(rt = 3, 5/3 * 1 + 5/3 * 4 = 8.3333): the audio reference at 3 + 8.3333,
  // on the target's w extremes.
  const double c_audio = 3 + (5.0 / 3.0 * 1 + 5.0 / 3.0 * 4);
  expect_pos(l, 18, c_audio, 0, 0);
  expect_pos(l, 21, c_audio + 1, 0, 16);
  // The target timeline: c0 = L + 1 + 8.3333 + 2 (the spans added in order).
  const double c0 = ((2.0 + 1.0) + (5.0 / 3.0 * 1 + 5.0 / 3.0 * 4)) + 2.0;
  expect_pos(l, 22, c0, 0, 0);
  expect_pos(l, 24, c0, 0, 0);

  const TimestepPlan p = make_conditioned_plan(l, kTimes);
  EXPECT_EQ(p.values, (std::vector<double>{0.25, 0.5, 0.999, 1.0}));
  EXPECT_EQ(adaln_indices(l, p)[2], 2 * 3 + 0);  // ref_img: max(t_v, 0.999), tag video
  EXPECT_EQ(adaln_indices(l, p)[4], 3 * 3 + 2);  // ref_audio: max(t_a, 1.0), tag audio
  EXPECT_EQ(l.cond_video_indices.size(), 10u);
  EXPECT_EQ(l.cond_audio_indices.size(), 10u);
}

TEST(LayoutPacked, LayoutChecksItsSpec) {
  LayoutSpec s = target();
  s.text_tags = {1, 1};
  EXPECT_THROW(make_layout(s), Error);  // 2 tags for 3 tokens
  s = target();
  s.refs = {{ReferenceKind::image, 1, 3, 4, 0}};
  EXPECT_THROW(make_layout(s), Error);  // odd reference height
}

// ---- denoise masks ----------------------------------------------------------------------

// A caller's layout (ComfyUI's PackedLayout) against h3rt's: equal, or the first difference in
// the segment table or the positions, named.
TEST(LayoutPacked, LayoutDifferenceNamesTheFirstDifference) {
  const SequenceLayout l = make_layout(target());
  std::vector<NamedSegment> segs{{0, 3, "text"}, {3, 7, "audio"}, {7, 15, "video"}};
  std::vector<double> pos = l.position_ids;
  EXPECT_EQ(layout_difference(l, segs, pos), "");
  // The same value by another float64 route (a last-bit difference) is what RoPE reads: equal.
  pos[3 * 11 + 0] = std::nextafter(pos[3 * 11 + 0], 100.0);
  EXPECT_NE(pos[3 * 11 + 0], l.position_ids[3 * 11 + 0]);
  EXPECT_EQ(layout_difference(l, segs, pos), "");
  pos[3 * 11 + 0] = l.position_ids[3 * 11 + 0] + 0.5;
  EXPECT_EQ(layout_difference(l, segs, pos),
            "position_ids row 11 (as float32): the caller's (5.166666666666667, 0, 0), h3rt's "
            "(4.666666666666667, 0, 0)");
  pos.resize(3 * 14);
  EXPECT_EQ(layout_difference(l, segs, pos), "position_ids: the caller's has 14 rows, h3rt's 15");
  segs[1].kind = "cond_audio";
  EXPECT_EQ(layout_difference(l, segs, pos),
            "segment 1: the caller's (cond_audio, 3, 7), h3rt's (audio, 3, 7)");
  segs.pop_back();
  EXPECT_EQ(layout_difference(l, segs, pos), "the caller's layout has 2 segments, h3rt's 3");
}

TEST(Masks, VideoMaskRowsArePatchMaxima) {
  // T = 1, 4 x 4 latent: patch (0, 0) holds {0, 0.25, 0, 0}; the others 1, 0.5, 0.
  std::vector<float> m(16, 0.0f);
  m[1] = 0.25f;                      // (y 0, x 1) in patch (0, 0)
  m[2] = m[3] = m[6] = m[7] = 1.0f;  // patch (0, 1)
  m[8] = 0.5f;                       // patch (1, 0)
  const std::vector<float> rows = video_mask_rows(m.data(), 1, 4, 4);
  EXPECT_EQ(rows, (std::vector<float>{0.25f, 1.0f, 0.5f, 0.0f}));
  std::vector<float> open(16, 0.999f);  // >= 1 - 1e-3 everywhere: no per-row timesteps
  EXPECT_TRUE(video_mask_rows(open.data(), 1, 4, 4).empty());
  open[0] = open[1] = open[4] = open[5] = 0.998f;  // one whole patch below 0.999
  EXPECT_FALSE(video_mask_rows(open.data(), 1, 4, 4).empty());
}

TEST(Masks, VideoMaskRowTimestepsFollowTheRule) {
  // As written in _forward: rows_t = clamp(1 - m * sigma_v, max = max(t_v, 0.999)), float32.
  const SequenceLayout l = make_layout(target(3, 1, 1));  // 4 video rows
  RowMasks masks;
  masks.video = {0.0f, 0.5f, 1.0f, 0.25f};
  const TimestepPlan p = make_conditioned_plan(l, kTimes, {}, masks);
  const float pin = static_cast<float>(std::max(0.25, 0.999));            // 0x3f7fbe77
  const std::vector<float> want = {std::min(1.0f - 0.0f * 0.75f, pin),    // 0.999 (pinned)
                                   std::min(1.0f - 0.5f * 0.75f, pin),    // 0.625
                                   std::min(1.0f - 1.0f * 0.75f, pin),    // 0.25 = t_v
                                   std::min(1.0f - 0.25f * 0.75f, pin)};  // 0.8125
  const int64_t v0 = l.video_indices[0];
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(bits(p.timestep[p.timestep_indices[v0 + r]]), bits(want[r])) << "row " << r;
  EXPECT_EQ(p.values, (std::vector<double>{0.25, 0.5, 0.625, 0.8125, double(pin)}));
  const std::vector<ModSegment> mods = mod_segments(l, p);
  EXPECT_EQ(mods.back(), (ModSegment{v0, v0 + 4, -1}));  // per-row segment
  // Every row one value: that value relabels the whole segment (one table row).
  masks.video = {0.5f, 0.5f, 0.5f, 0.5f};
  const TimestepPlan q = make_conditioned_plan(l, kTimes, {}, masks);
  EXPECT_EQ(q.values, (std::vector<double>{0.25, 0.5, 0.625}));
  EXPECT_EQ(mod_segments(l, q).back(), (ModSegment{v0, v0 + 4, 2 * 3 + 0}));
}

TEST(Masks, AudioMaskRowTimestepsFollowTheRule) {
  // rows_t = clamp(1 - m * float32(1 - t_a), max = max(t_a, 1.0)); t_a = 0.5: sigma_a = 0.5.
  const SequenceLayout l = make_layout(target(3, 1, 2));  // 4 audio rows
  RowMasks masks;
  masks.audio = {0.0f, 0.5f, 1.0f, 1.0f};
  const TimestepPlan p = make_conditioned_plan(l, kTimes, {}, masks);
  const int64_t a0 = l.audio_indices[0];
  const std::vector<float> want = {1.0f, 0.75f, 0.5f, 0.5f};  // 1 - m * 0.5, at most 1
  for (int r = 0; r < 4; ++r) EXPECT_EQ(p.timestep[p.timestep_indices[a0 + r]], want[r]);
  EXPECT_EQ(p.values, (std::vector<double>{0.25, 0.5, 0.75, 1.0}));
}

TEST(Masks, OutputsAreMultipliedByTheMask) {
  // Video: feature (c, iy, ix) of patch row (f, y, x) times mask[f][2y + iy][2x + ix].
  std::vector<float> mask(16);
  for (int i = 0; i < 16; ++i) mask[i] = 0.0625f * i;
  std::vector<float> v(4 * 96, 2.0f);
  apply_video_mask(v.data(), mask.data(), 24, 1, 4, 4);
  EXPECT_EQ(v[0], 2.0f * mask[0]);
  EXPECT_EQ(v[1 * 96 + 5 * 4 + 3], 2.0f * mask[(0 * 4 + 2 * 0 + 1) * 4 + 2 * 1 + 1]);  // row 1
  EXPECT_EQ(v[2 * 96 + 2], 2.0f * mask[(2 * 1 + 1) * 4 + 0]);  // row (y 1, x 0), iy 1, ix 0
  // Audio: row r times mask[r].
  std::vector<float> a(4 * 32, 3.0f);
  const std::vector<float> am = {0.0f, 0.25f, 1.0f, 0.5f};
  apply_audio_mask(a.data(), am.data(), 32, 2);
  EXPECT_EQ(a[0], 0.0f);
  EXPECT_EQ(a[1 * 32 + 7], 0.75f);
  EXPECT_EQ(a[3 * 32 + 31], 1.5f);
}

TEST(Conditioning, NoiseAugmentationRoundsLikeTorch) {
  // a_v = 0.999: float32(0.999) = 0x3f7fbe77, float32(1 - 0.999) = 0x3a83126f (README 4.5).
  EXPECT_EQ(bits(static_cast<float>(0.999)), 0x3f7fbe77u);
  EXPECT_EQ(bits(static_cast<float>(1.0 - 0.999)), 0x3a83126fu);
  std::vector<float> r = {1.5f, -0.25f}, z = {0.75f, 2.0f};
  augment_condition_rows(r.data(), z.data(), 2, 0.999);
  const float a = static_cast<float>(0.999), b = static_cast<float>(1.0 - 0.999);
  EXPECT_EQ(bits(r[0]), bits(a * 1.5f + b * 0.75f));
  EXPECT_EQ(bits(r[1]), bits(a * -0.25f + b * 2.0f));
  std::vector<float> keep = {1.5f};
  augment_condition_rows(keep.data(), z.data(), 1, 1.0);  // aug >= 1: unchanged
  EXPECT_EQ(keep[0], 1.5f);
}

TEST(Conditioning, ComfyEvalTimesFromSigma) {
  // sigma_v = float32(float32(0.7) * 1000 / 1000); t_v = 1 - sigma_v, t_a = 1 - shift(12 -> 3).
  const EvalTimes t = comfy_eval_times(0.7f);
  const double sv = 0.699999988079071;  // float32(0.7)
  EXPECT_EQ(t.sigma_video, sv);
  EXPECT_EQ(t.t_video, 1.0 - sv);
  const double b = sv / (12.0 + sv * (1.0 - 12.0));
  EXPECT_EQ(t.t_audio, 1.0 - 3.0 * b / (1.0 + 2.0 * b));
  EXPECT_EQ(bits(static_cast<float>(t.t_audio)), 0x3f21af29u);   // the golden's 0.631579
  EXPECT_EQ(comfy_eval_times(0.0f).sigma_video, double(1e-6f));  // clamped
}

}  // namespace
}  // namespace h3rt
