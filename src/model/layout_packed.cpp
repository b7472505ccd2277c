// The general packed layout (ComfyUI's PackedLayout): keyframe condition rows and reference blocks
// between the text and the target streams. Positions follow ComfyUI's float64 arithmetic
// operation for operation, so that position_ids matches it bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "h3rt/check.h"
#include "h3rt/layout.h"

namespace h3rt {
namespace {

constexpr double kFrameRescale = 5.0 / 3.0;
constexpr double kFramePattern[5] = {1.0, 4.0, 4.0, 4.0, 4.0};

double frame_span(int64_t k) {
  return kFrameRescale * kFramePattern[k % 5];
}

// Sum of the spans of n latent frames, accumulated from 0 in order (Python's sum()).
double frames_span(int64_t n) {
  double s = 0.0;
  for (int64_t k = 0; k < n; ++k) s += frame_span(k);
  return s;
}

// (i * (ratio / n) + (1 - ratio) / 2) * 32 for the n = D/2 patch rows of an axis of length D.
std::vector<double> axis(int64_t len, double sqrt_area) {
  const double ratio = static_cast<double>(len) / sqrt_area;
  const int64_t n = len / 2;
  const double step = ratio / static_cast<double>(n), left = (1.0 - ratio) / 2.0;
  std::vector<double> c(n);
  for (int64_t i = 0; i < n; ++i) c[i] = (static_cast<double>(i) * step + left) * 32.0;
  return c;
}

// One latent frame's patch rows (h-major) of a latent h x w.
struct FrameGrid {
  std::vector<double> h, w;
  int64_t rows() const { return static_cast<int64_t>(h.size() * w.size()); }
};

FrameGrid frame_grid(int64_t h, int64_t w, const char* what) {
  H3RT_CHECK(h > 0 && w > 0 && h % 2 == 0 && w % 2 == 0, "layout: ", what,
             " latent height and width must be positive and even, got ", h, " x ", w);
  const double area = std::sqrt(static_cast<double>(h * w));
  return {axis(h, area), axis(w, area)};
}

class Builder {
 public:
  explicit Builder(SequenceLayout& l) : l_(l) {}

  void text(int64_t L, const std::vector<int32_t>& tags) {
    begin(SegmentKind::text);
    for (int64_t i = 0; i < L; ++i) {
      l_.text_indices.push_back(i);
      add(tags.empty() ? kTagText : tags[i], static_cast<double>(i), 0.0, 0.0);
    }
    end();
  }

  // 2*len rows, channel-major: (cursor + j, 0, w_low) then (cursor + j, 0, w_high).
  void audio(SegmentKind kind, double cursor, int64_t len, double w_low, double w_high) {
    begin(kind);
    auto& idx = kind == SegmentKind::audio ? l_.audio_indices : l_.cond_audio_indices;
    for (int64_t ch = 0; ch < 2; ++ch)
      for (int64_t j = 0; j < len; ++j) {
        idx.push_back(row_);
        add(kTagAudio, cursor + static_cast<double>(j), 0.0, ch == 0 ? w_low : w_high);
      }
    end();
  }

  // n frames on `grid`, frame k at origin + the spans of frames 0..k-1 (constant t when `flat`).
  void video(SegmentKind kind, double origin, int64_t n, const FrameGrid& grid, bool flat = false) {
    begin(kind);
    auto& idx = kind == SegmentKind::video ? l_.video_indices : l_.cond_video_indices;
    double acc = 0.0;
    for (int64_t f = 0; f < n; ++f) {
      const double t = flat ? origin : origin + acc;
      acc += frame_span(f);
      for (double h : grid.h)
        for (double w : grid.w) {
          idx.push_back(row_);
          add(kTagVideo, t, h, w);
        }
    }
    end();
  }

 private:
  void begin(SegmentKind k) { seg_ = {row_, row_, k}; }
  void end() {
    seg_.stop = row_;
    l_.segments.push_back(seg_);
  }
  void add(int32_t tag, double t, double h, double w) {
    l_.token_tags.push_back(tag);
    l_.position_ids.insert(l_.position_ids.end(), {t, h, w});
    ++row_;
  }

  SequenceLayout& l_;
  Segment seg_;
  int64_t row_ = 0;
};

double ref_span(const ReferenceSlot& r) {
  switch (r.kind) {
    case ReferenceKind::image:
      return 1.0;
    case ReferenceKind::audio:
      return static_cast<double>(r.audio_len);
    case ReferenceKind::video:
      return std::max(static_cast<double>(r.audio_len), frames_span(r.frames));
  }
  return 0.0;
}

void check_spec(const LayoutSpec& s) {
  H3RT_CHECK(s.text_len >= 0 && s.audio_len >= 0, "layout: negative text (", s.text_len,
             ") or audio (", s.audio_len, ") length");
  H3RT_CHECK(s.frames > 0, "layout: the target needs at least one latent frame, got ", s.frames);
  H3RT_CHECK(s.text_tags.empty() || static_cast<int64_t>(s.text_tags.size()) == s.text_len,
             "layout: ", s.text_tags.size(), " text tags for ", s.text_len, " text tokens");
  for (int32_t t : s.text_tags)
    H3RT_CHECK(t == 0 || t == 1, "layout: text tags are 1 (text) or 0 (vision block), got ", t);
  for (const KeyframeSlot& k : s.keyframes)
    H3RT_CHECK(k.frame_index >= 0 && k.video_frames >= 0 && k.audio_len >= 0,
               "layout: keyframe frame index, video frames and audio length must be >= 0, got ",
               k.frame_index, ", ", k.video_frames, ", ", k.audio_len);
  for (const ReferenceSlot& r : s.refs) {
    H3RT_CHECK(r.audio_len >= 0, "layout: negative reference audio length ", r.audio_len);
    H3RT_CHECK(r.kind != ReferenceKind::video || r.frames > 0,
               "layout: a video reference needs at least one latent frame, got ", r.frames);
  }
}

void add_keyframes(Builder& b, const LayoutSpec& s, double c0, const FrameGrid& target) {
  for (const KeyframeSlot& k : s.keyframes) {
    const double t = c0 + kFrameRescale * static_cast<double>(k.frame_index);
    if (k.video_frames > 0) b.video(SegmentKind::cond, t, k.video_frames, target);
    if (k.audio_len > 0)
      b.audio(SegmentKind::cond_audio, t, k.audio_len, target.w.front(), target.w.back());
  }
}

void add_refs(Builder& b, const LayoutSpec& s, const FrameGrid& target) {
  double cursor = static_cast<double>(s.text_len);
  for (const ReferenceSlot& r : s.refs) {
    if (r.kind == ReferenceKind::image) {
      b.video(SegmentKind::ref_img, cursor, 1, frame_grid(r.height, r.width, "image reference"),
              true);
    } else if (r.kind == ReferenceKind::audio) {
      if (r.audio_len > 0)
        b.audio(SegmentKind::ref_audio, cursor, r.audio_len, target.w.front(), target.w.back());
    } else {
      const FrameGrid g = frame_grid(r.height, r.width, "video reference");
      if (r.audio_len > 0)
        b.audio(SegmentKind::ref_audio, cursor, r.audio_len, g.w.front(), g.w.back());
      b.video(SegmentKind::ref_img, cursor, r.frames, g);
    }
    cursor += ref_span(r);
  }
}

}  // namespace

const char* segment_kind_name(SegmentKind k) {
  static const char* names[] = {"text",      "cond",  "cond_audio", "ref_img",
                                "ref_audio", "audio", "video"};
  return names[static_cast<int32_t>(k)];
}

bool is_video_kind(SegmentKind k) {
  return k == SegmentKind::cond || k == SegmentKind::ref_img || k == SegmentKind::video;
}

const char* reference_kind_name(ReferenceKind k) {
  static const char* names[] = {"image", "video", "audio"};
  return names[static_cast<int32_t>(k)];
}

std::string layout_difference(const SequenceLayout& l, const std::vector<NamedSegment>& segs,
                              const std::vector<double>& pos) {
  auto seg_str = [](const std::string& kind, int64_t a, int64_t b) {
    return "(" + kind + ", " + std::to_string(a) + ", " + std::to_string(b) + ")";
  };
  if (segs.size() != l.segments.size())
    return "the caller's layout has " + std::to_string(segs.size()) + " segments, h3rt's " +
           std::to_string(l.segments.size());
  for (size_t i = 0; i < segs.size(); ++i) {
    const Segment& s = l.segments[i];
    if (segs[i].start != s.start || segs[i].stop != s.stop ||
        segs[i].kind != segment_kind_name(s.kind))
      return "segment " + std::to_string(i) + ": the caller's " +
             seg_str(segs[i].kind, segs[i].start, segs[i].stop) + ", h3rt's " +
             seg_str(segment_kind_name(s.kind), s.start, s.stop);
  }
  if (pos.size() != l.position_ids.size())
    return "position_ids: the caller's has " + std::to_string(pos.size() / 3) + " rows, h3rt's " +
           std::to_string(l.position_ids.size() / 3);
  for (size_t i = 0; i < pos.size(); ++i)
    if (static_cast<float>(pos[i]) != static_cast<float>(l.position_ids[i])) {
      const size_t r = i / 3;
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "position_ids row %zu (as float32): the caller's (%.17g, %.17g, %.17g), ", r,
                    pos[3 * r], pos[3 * r + 1], pos[3 * r + 2]);
      std::string m = buf;
      std::snprintf(buf, sizeof buf, "h3rt's (%.17g, %.17g, %.17g)", l.position_ids[3 * r],
                    l.position_ids[3 * r + 1], l.position_ids[3 * r + 2]);
      return m + buf;
    }
  return "";
}

SequenceLayout make_layout(const LayoutSpec& s) {
  check_spec(s);
  const FrameGrid target = frame_grid(s.height, s.width, "target video");
  SequenceLayout l;
  l.text_len = s.text_len;
  l.audio_len = s.audio_len;
  l.frames = s.frames;
  l.height = s.height;
  l.width = s.width;
  double c0 = static_cast<double>(s.text_len);  // the target timeline starts after the refs
  for (const ReferenceSlot& r : s.refs) c0 += ref_span(r);

  Builder b(l);
  b.text(s.text_len, s.text_tags);
  add_keyframes(b, s, c0, target);
  add_refs(b, s, target);
  b.audio(SegmentKind::audio, c0, s.audio_len, target.w.front(), target.w.back());
  b.video(SegmentKind::video, c0, s.frames, target);
  return l;
}

}  // namespace h3rt
