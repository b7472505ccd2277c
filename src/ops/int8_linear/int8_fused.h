// int8 output of a fused producer: the optional `Int8Out` block that rmsnorm_modulate accepts
// (qkv / fc1 inputs). With it set, the producer stages each bf16 output row in shared memory,
// rotates it by the group-wise Hadamard matrix and quantizes it (int8_detail::quantize_staged_row:
// the team quantizer's operations), so q and scale are bit-identical to "producer writes bf16, then
// int8_quantize_rows_cuda" on the same values, and the bf16 intermediate need not be written.
// A row's scale needs only that row, so one pass suffices (no grid-wide amax, unlike NVFP4's
// computed global scale). Constraints (int8_fusable): cols % 16 == 0 and cols % group == 0,
// group 16, 64 or 256 (the release's 256 and the tiny model's 16 / 64; other groups and plain
// per-row int8 stay unfused), q 16-byte aligned with q_row_stride % 16 == 0.
#pragma once

#include <cstdint>

#include "h3rt/check.h"

namespace h3rt::ops {

// The arithmetic of the activation rotation (rotate_quantize.cuh), bit-identical in q and scale:
// kDouble = the host's double butterflies; kInteger = exact integer sums, in int32 where a warp's
// 512 columns allow it, else int64 (only where FP64 is slow), else double. kAuto: the default of
// the compiled arch (int8_detail::integer_rotation_default: integer on sm_120 / sm_121, whose FP64
// runs at 1/64 of FP32, and on Hopper, where it measured faster; double elsewhere). Forcing one
// is for tests and benchmarks.
enum class Int8RotateMath : uint8_t { kAuto, kDouble, kInteger };

// `m` unless it is kAuto and H3RT_INT8_ROTATE names a form (double or integer: side-by-side
// benchmarks of the forms in a whole block); any other value of the variable is an error. The
// launchers of every rotating kernel apply it.
Int8RotateMath int8_rotate_env(Int8RotateMath m);

inline const char* int8_rotate_math_name(Int8RotateMath m) {
  return m == Int8RotateMath::kDouble    ? "double"
         : m == Int8RotateMath::kInteger ? "integer"
                                         : "auto";
}

struct Int8Out {
  int8_t* q = nullptr;     // [rows, cols] int8, row stride q_row_stride (0: cols); null: off
  float* scale = nullptr;  // [rows] f32
  int group = 0;           // rotation group G
  int64_t q_row_stride = 0;
  Int8RotateMath rotate = Int8RotateMath::kAuto;  // tests / benchmarks force a form
  uint32_t* rotate_tiers = nullptr;  // tests: uint32[2] += units the integer form rotated in
                                     // double ([0]) and in int64 ([1]) (rotate_quantize.cuh)

  bool enabled() const { return q != nullptr; }
};

constexpr bool int8_fusable(int64_t cols, int group) {
  return (group == 16 || group == 64 || group == 256) && cols % 16 == 0 && cols % group == 0;
}

// Validates an enabled Int8Out for `cols` output columns (throws naming `op`).
inline void check_int8_out(const Int8Out& o, const char* op, int64_t cols) {
  H3RT_CHECK(o.q && o.scale, op, ": int8 output needs q and scale");
  H3RT_CHECK(int8_fusable(cols, o.group), op, ": int8 output needs group 16, 64 or 256 dividing ",
             "the ", cols, " columns (a multiple of 16), got group ", o.group);
  const int64_t stride = o.q_row_stride ? o.q_row_stride : cols;
  H3RT_CHECK(stride >= cols && stride % 16 == 0 && reinterpret_cast<uintptr_t>(o.q) % 16 == 0, op,
             ": int8 output rows must be 16-byte aligned (row stride ", stride, ")");
}

}  // namespace h3rt::ops
