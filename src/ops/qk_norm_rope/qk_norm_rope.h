// qk_norm_rope: per-head RMSNorm of q and k followed by split-half RoPE, IN PLACE on the fused
// QKV projection output [rows, 3*I] (I = heads * head_dim; q at column q_offset, k at k_offset,
// head h at +h*head_dim), addressed through its row stride so no copy is made.
//
//   n = x / sqrt(mean(x^2) + eps) * w              over the head_dim channels of one head
//   for j < R/2 (R = rope_dim, channels [R, head_dim) pass through):
//     out[j]       = n[j] * cos[j]       - n[j+R/2] * sin[j]
//     out[j + R/2] = n[j+R/2] * cos[j+R/2] + n[j] * sin[j+R/2]
// cos/sin are [rows, R] tables (rope_table). `norm` and `rope` select the stages, so callers can
// observe the normalized values between them.
//
// Precision: bf16 mode rounds the norm once (as rmsnorm_modulate), casts cos/sin to bf16 and
// rounds each product and the sum; fp32 mode is float32 math.
#pragma once

#include <cstdint>

namespace h3rt::ops {

struct QkNormRopeParams {
  float* qkv = nullptr;  // [rows, row_stride]
  int64_t row_stride = 0;
  int64_t q_offset = 0, k_offset = 0;  // column of head 0 of q and of k
  int64_t rows = 0, heads = 0, head_dim = 128, rope_dim = 96;
  const float* q_weight = nullptr;  // [head_dim], shared by all heads
  const float* k_weight = nullptr;
  const float* cos = nullptr;  // [rows, table_row_stride (0: rope_dim)]
  const float* sin = nullptr;
  int64_t table_row_stride = 0;
  float eps = 1e-5f;
  bool norm = true;
  bool rope = true;
  bool bf16 = false;
};

void qk_norm_rope_cpu(const QkNormRopeParams& p);

}  // namespace h3rt::ops

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace h3rt::ops {

// GPU version (cuda.cu): bf16 QKV in place, float32 math, bit-exact with qk_norm_rope_cpu in
// bf16 mode (cos/sin are float32 tables rounded to bf16 in the kernel). head_dim must be 128,
// rope_dim a multiple of 16; row stride and offsets multiples of 8; pointers 16-byte aligned;
// the cos/sin row stride a multiple of 4. Device pointers.
struct QkNormRopeCudaParams {
  __nv_bfloat16* qkv = nullptr;  // [rows, row_stride]
  int64_t row_stride = 0;
  int64_t q_offset = 0, k_offset = 0;
  int64_t rows = 0, heads = 0, head_dim = 128, rope_dim = 96;
  const __nv_bfloat16* q_weight = nullptr;  // [head_dim] or null (ones)
  const __nv_bfloat16* k_weight = nullptr;
  const float* cos = nullptr;  // [rows, table_row_stride (0: rope_dim)] float32
  const float* sin = nullptr;
  int64_t table_row_stride = 0;
  float eps = 1e-5f;
  bool norm = true;
  bool rope = true;
  int slots = 0;  // tuning: heads per half-warp in flight, 2, 4 or 7 (0: the default, 4)
  // Kernel choice, bit-identical outputs. ring (the default): persistent CTAs streaming whole
  // rows (q, k, cos, sin) through a ring of 4 shared-memory slots with bulk copies, heads in
  // passes of 4 (sm_90+, heads <= 56; elsewhere the other kernel runs); false: one CTA per (row,
  // head group), `slots` as above. The ring measured fastest on the H200 at the seed shape;
  // three other ring configurations (2 slots in passes of 2 or 4, 3 slots) measured slower and
  // were retired (bench/RESULTS.md).
  bool ring = true;
};

cudaError_t qk_norm_rope_cuda(const QkNormRopeCudaParams& p, cudaStream_t stream);

}  // namespace h3rt::ops
#endif  // H3RT_HAVE_CUDA
