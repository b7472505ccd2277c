// The packed sequence of one request (batch 1): row indices, modality tags, rotary positions,
// segments, per-row timesteps, and video patchify/unpatchify. t2va packs [text | audio | video];
// conditioned requests pack [text | keyframe rows | reference blocks | target audio | target video]
// (make_layout, ComfyUI's PackedLayout).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "h3rt/memory.h"

namespace h3rt {

enum ModalityTag : int32_t { kTagVideo = 0, kTagText = 1, kTagAudio = 2 };

// Segment kinds in packed order; the codes are those of the h3_tiny_comfy golden set.
enum class SegmentKind : int32_t {
  text = 0,
  cond = 1,        // keyframe video rows (patchified latent)
  cond_audio = 2,  // keyframe audio rows
  ref_img = 3,     // reference video rows (an image or a clip)
  ref_audio = 4,   // reference audio rows
  audio = 5,       // target audio (generated)
  video = 6,       // target video (generated)
};
const char* segment_kind_name(SegmentKind k);
bool is_video_kind(SegmentKind k);  // cond, ref_img, video: rows through the video patch projection

struct Segment {
  int64_t start = 0, stop = 0;  // packed rows [start, stop)
  SegmentKind kind = SegmentKind::text;
  bool operator==(const Segment&) const = default;
};

// A keyframe (ComfyUI MiniMaxH3ImageToVideo / AddGuide): condition rows on the target's spatial
// grid, anchored at pixel frame `frame_index` of the target. video_frames: latent frames of its
// video latent (1 for an image, 0 for none); audio_len: audio latents per channel (0 for none).
struct KeyframeSlot {
  int64_t frame_index = 0;
  int64_t video_frames = 1;
  int64_t audio_len = 0;
  bool operator==(const KeyframeSlot&) const = default;
};

// A reference block (ComfyUI MiniMaxH3ReferenceToVideo), on its own spatial grid (height, width:
// its latent size, even). image: one latent frame; video: `frames` latent frames and an optional
// soundtrack (audio_len > 0); audio: audio_len latents, no video.
enum class ReferenceKind : int32_t { image, video, audio };
const char* reference_kind_name(ReferenceKind k);
struct ReferenceSlot {
  ReferenceKind kind = ReferenceKind::image;
  int64_t frames = 1, height = 0, width = 0;  // video latent (image: frames = 1)
  int64_t audio_len = 0;
  bool operator==(const ReferenceSlot&) const = default;
};

// Everything a packed layout is a function of (its signature): rebuilt only when this changes.
struct LayoutSpec {
  int64_t text_len = 0, audio_len = 0, frames = 0, height = 0, width = 0;
  std::vector<int32_t> text_tags;  // [L]: 1 text token, 0 vision-block token; empty: all 1
  std::vector<KeyframeSlot> keyframes;
  std::vector<ReferenceSlot> refs;
  bool operator==(const LayoutSpec&) const = default;
};

struct SequenceLayout {
  int64_t text_len = 0;   // L
  int64_t audio_len = 0;  // N latents per stereo channel (2N audio rows)
  int64_t frames = 0;     // latent T
  int64_t height = 0;     // latent Hl (even)
  int64_t width = 0;      // latent Wl (even)

  // Packed rows of the text and of the target (generated) audio and video: the output rows.
  std::vector<int64_t> text_indices, audio_indices, video_indices;
  // Packed rows of the condition rows (keyframes, then references), in packed order: the rows
  // of ForwardInputs::cond_video_rows / cond_audio_rows.
  std::vector<int64_t> cond_video_indices, cond_audio_indices;
  std::vector<int32_t> token_tags;   // [S]
  std::vector<double> position_ids;  // [S, 3] row-major (t, h, w), float64 as the reference
  std::vector<Segment> segments;     // contiguous, covering [0, S); empty for hand-built layouts

  int64_t audio_rows() const { return 2 * audio_len; }
  int64_t video_rows() const { return frames * (height / 2) * (width / 2); }
  int64_t cond_rows() const {
    return static_cast<int64_t>(cond_video_indices.size() + cond_audio_indices.size());
  }
  int64_t seq_len() const { return text_len + audio_rows() + video_rows() + cond_rows(); }
};

// Builds indices, tags and positions exactly as the reference pipeline (README section 3-4).
SequenceLayout make_t2va_layout(int64_t text_len, int64_t audio_len, int64_t frames, int64_t height,
                                int64_t width);

// The general layout, ComfyUI's PackedLayout (comfy/ldm/minimax/model.py) in float64 operation for
// operation: [text | per keyframe: cond, cond_audio | per reference: ref_img (image), ref_audio
// then ref_img (video), ref_audio (audio) | audio | video]. Positions: text row i (i, 0, 0); the
// target timeline starts at c0 = L + the references' time spans (image 1, audio rt, video
// max(rt, its frames' spans)); a latent frame spans 5/3 * (1,4,4,4,4)[k mod 5]; the spatial axis
// of a latent h x w is (i * (ratio / n) + (1 - ratio) / 2) * 32 with ratio = D / sqrt(h w),
// n = D / 2; audio rows (cursor + j, 0, w_first / w_last) per stereo channel. Keyframes anchor
// at c0 + 5/3 * frame_index on the target grid (their audio at the target's w extremes);
// references run a cursor from L, each on its own grid (a clip's soundtrack at its own w
// extremes, a standalone audio reference at the target's). Text rows take text_tags.
// For a spec without keyframes, references and tags the rows are those of make_t2va_layout;
// positions may differ from it in the last float64 bit (ComfyUI's ratio/n against diffusers'
// linspace form), never after the float32 cast RoPE uses for the shapes tested.
SequenceLayout make_layout(const LayoutSpec& spec);

// A caller's packed layout (ComfyUI's PackedLayout: its segment table and float64 position_ids
// [S, 3]) against h3rt's: "" when the segments (start, stop, kind name) are equal and every
// position is after the float32 cast RoPE reads them through (both rope tables take
// float32(position)), else where they first differ. A ComfyUI whose layout was changed (a custom
// node that patches PackedLayout) is told apart from the one h3rt computes; a last-bit float64
// difference of the same arithmetic written another way (ComfyUI versions differ so) is not.
struct NamedSegment {
  int64_t start = 0, stop = 0;
  std::string kind;
};
std::string layout_difference(const SequenceLayout& layout,
                              const std::vector<NamedSegment>& segments,
                              const std::vector<double>& position_ids);

// Per-row timesteps: `timestep` holds the distinct values sorted ascending, and
// `timestep_indices[r]` each row's index into it (text and video rows: t_video, audio: t_audio).
struct TimestepPlan {
  std::vector<float> timestep;
  std::vector<int64_t> timestep_indices;  // [S]
  // The float64 values `timestep` was rounded from (ComfyUI's unique_t), when the plan was built
  // by make_conditioned_plan (conditioning.h); two of them may round to one float32.
  std::vector<double> values;
};
TimestepPlan make_timestep_plan(const SequenceLayout& layout, float t_video, float t_audio);

// AdaLN table row per packed row: timestep_indices[r] * 3 + token_tags[r].
std::vector<int64_t> adaln_indices(const SequenceLayout& layout, const TimestepPlan& plan);

// ComfyUI's mod_segments: one (start, stop, table row) per segment, the text span split into runs
// of equal row; row -1 where the segment's rows differ (a partial denoise mask). Segments without
// rows are left out (ComfyUI lists them with the row they would read).
struct ModSegment {
  int64_t start = 0, stop = 0, row = 0;
  bool operator==(const ModSegment&) const = default;
};
std::vector<ModSegment> mod_segments(const SequenceLayout& layout, const TimestepPlan& plan);

// Video latent [24, T, Hl, Wl] <-> rows [T*(Hl/2)*(Wl/2), 96] (patch (1,2,2), channel-major).
FloatVec patchify_video(const float* latents, int64_t channels, int64_t frames, int64_t height,
                        int64_t width);
FloatVec unpatchify_video(const float* rows, int64_t channels, int64_t frames, int64_t height,
                          int64_t width);

// Audio latent [2, 32, N] <-> rows [2N, 32] (row ch*N + j holds the 32 channels of step j).
FloatVec audio_latents_to_rows(const float* latents, int64_t channels, int64_t len);
FloatVec audio_rows_to_latents(const float* rows, int64_t channels, int64_t len);

}  // namespace h3rt
