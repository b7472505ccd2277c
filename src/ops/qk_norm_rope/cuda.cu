// qk_norm_rope on the GPU (declared in qk_norm_rope.h), in place on the strided QKV buffer.
// A half-warp owns one (row, q|k, head) slot of 128 channels, 8 per lane in one 16-byte vector:
// the per-head sum of squares is a 4-step shuffle reduction (in double, exact for bf16 inputs,
// matching the CPU reference bit for bit), and the rotate-half partner of lane l (channels
// j <-> j + R/2) is lane l +- R/16, fetched with one shuffle per bf16 pair.
#include "cuda/device_math.cuh"
#include "cuda/runtime.h"
#include "ops/qk_norm_rope/qk_norm_rope.h"

namespace h3rt::ops {

namespace {

using cuda::rbf;

constexpr int kHeadDim = 128;
constexpr int kThreads = 256;  // 16 slots per block

__global__ void __launch_bounds__(kThreads) qk_norm_rope_kernel(QkNormRopeCudaParams p) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * (kThreads / 16) + threadIdx.x / 16;
  const int lane = threadIdx.x & 15;
  // Slots per row (2*heads) are even and a warp holds two consecutive slots, so this exit is
  // uniform per warp and the full-mask shuffles below stay valid.
  if (slot >= p.rows * 2 * p.heads) return;
  const int64_t row = slot / (2 * p.heads);
  const int64_t s2 = slot - row * 2 * p.heads;
  const bool is_k = s2 >= p.heads;
  const int64_t head = is_k ? s2 - p.heads : s2;
  __nv_bfloat16* x =
      p.qkv + row * p.row_stride + (is_k ? p.k_offset : p.q_offset) + head * kHeadDim + lane * 8;
  float v[8];
  cuda::unpack8(cuda::load8(x), v);
  if (p.norm) {
    double ss = 0.0;
#pragma unroll
    for (int e = 0; e < 8; ++e) ss = fma(double(v[e]), double(v[e]), ss);
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o, 16);
    const float mean = static_cast<float>(__ddiv_rn(ss, static_cast<double>(kHeadDim)));
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, p.eps)));
    const __nv_bfloat16* wp = is_k ? p.k_weight : p.q_weight;
    float w[8];
    if (wp) {
      cuda::unpack8(cuda::load8(wp + lane * 8), w);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) w[e] = 1.0f;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = rbf(__fmul_rn(__fmul_rn(v[e], inv), w[e]));
  }
  if (p.rope) {
    const int hl = static_cast<int>(p.rope_dim / 16);  // lanes per rotated half
    const int partner = lane < hl ? lane + hl : (lane < 2 * hl ? lane - hl : lane);
    // v holds bf16 values here (the input, or the rounded norm), so packing them is lossless.
    const cuda::Bf16x8 mine = cuda::pack8(v);
    float o[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t bits = *reinterpret_cast<const uint32_t*>(&mine.h[i]);
      bits = __shfl_sync(0xffffffffu, bits, partner, 16);
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
      o[2 * i] = f.x;
      o[2 * i + 1] = f.y;
    }
    if (lane < 2 * hl) {
      const float* cp = p.cos + row * p.table_row_stride + lane * 8;
      const float* sp = p.sin + row * p.table_row_stride + lane * 8;
      const float4 c0 = *reinterpret_cast<const float4*>(cp);
      const float4 c1 = *reinterpret_cast<const float4*>(cp + 4);
      const float4 s0 = *reinterpret_cast<const float4*>(sp);
      const float4 s1 = *reinterpret_cast<const float4*>(sp + 4);
      const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
      const float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
      const bool first = lane < hl;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float a = rbf(__fmul_rn(v[e], rbf(c[e])));
        const float b = rbf(__fmul_rn(o[e], rbf(s[e])));
        v[e] = rbf(first ? __fsub_rn(a, b) : __fadd_rn(a, b));
      }
    }
  }
  cuda::store8(x, cuda::pack8(v));
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace

cudaError_t qk_norm_rope_cuda(const QkNormRopeCudaParams& in, cudaStream_t stream) {
  QkNormRopeCudaParams p = in;
  if (!p.table_row_stride) p.table_row_stride = p.rope_dim;
  H3RT_CHECK(p.qkv && p.rows >= 0 && p.heads > 0, "qk_norm_rope_cuda: bad params");
  H3RT_CHECK(p.head_dim == kHeadDim, "qk_norm_rope_cuda: head_dim ", p.head_dim,
             " (only 128 is implemented)");
  H3RT_CHECK(p.rope_dim % 16 == 0 && p.rope_dim <= kHeadDim, "qk_norm_rope_cuda: rope_dim ",
             p.rope_dim, " must be a multiple of 16 and <= 128");
  H3RT_CHECK(p.row_stride % 8 == 0 && p.q_offset % 8 == 0 && p.k_offset % 8 == 0,
             "qk_norm_rope_cuda: row stride and offsets must be multiples of 8 elements");
  const int64_t span = p.heads * kHeadDim;
  H3RT_CHECK(p.q_offset + span <= p.row_stride && p.k_offset + span <= p.row_stride,
             "qk_norm_rope_cuda: q/k columns exceed the row stride ", p.row_stride);
  H3RT_CHECK(!p.rope || (p.cos && p.sin && p.table_row_stride % 4 == 0 && aligned16(p.cos) &&
                         aligned16(p.sin) && p.table_row_stride >= p.rope_dim),
             "qk_norm_rope_cuda: rope needs 16-byte aligned cos/sin tables with a row stride "
             ">= rope_dim and a multiple of 4");
  H3RT_CHECK(aligned16(p.qkv) && aligned16(p.q_weight) && aligned16(p.k_weight),
             "qk_norm_rope_cuda: pointers must be 16-byte aligned");
  const int64_t slots = p.rows * 2 * p.heads;
  if (slots == 0 || (!p.norm && !p.rope)) return cudaSuccess;
  const int64_t blocks = (slots + kThreads / 16 - 1) / (kThreads / 16);
  qk_norm_rope_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  return H3RT_LAUNCH_CHECK("qk_norm_rope");
}

}  // namespace h3rt::ops
