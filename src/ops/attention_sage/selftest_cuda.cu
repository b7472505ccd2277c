// The Sage self-test case on the device (selftest.h): host code over the op's launchers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/pair_sums.h"
#include "core/spot_check.h"
#include "cuda/runtime.h"
#include "h3rt/device.h"
#include "h3rt/formats.h"
#include "ops/attention_sage/attention_sage.h"
#include "ops/attention_sage/attention_sage_cuda.h"
#include "ops/attention_sage/selftest.h"

namespace h3rt::attention_sage {
namespace {

constexpr float kSmScale = 0.08838834764831845f;  // 1/sqrt(128)

template <typename T>
std::vector<T> download(const void* src, int64_t count) {
  std::vector<T> v(static_cast<size_t>(count));
  H3RT_CUDA_CHECK(cudaMemcpy(v.data(), src, v.size() * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

template <typename T>
int64_t mismatches(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return static_cast<int64_t>(std::max(a.size(), b.size()));
  return byte_mismatches(a.data(), b.data(), static_cast<int64_t>(a.size()));
}

// Pre-pass outputs that differ from the reference, over all seven tensors.
int64_t prepass_mismatches(const SageBuffers& b, const Quantized& ref) {
  const int64_t S = ref.seq, H = ref.heads, n = H * ref.padded * kHeadDim;
  return mismatches(download<int8_t>(b.q8, n), ref.q8) +
         mismatches(download<int8_t>(b.k8, n), ref.k8) +
         mismatches(download<uint8_t>(b.v8t, n), ref.v8t) +
         mismatches(download<float>(b.q_scale, H * q_scales_per_head(S)), ref.q_scale) +
         mismatches(download<float>(b.k_scale, H * k_scales_per_head(S)), ref.k_scale) +
         mismatches(download<float>(b.v_scale, H * kHeadDim), ref.v_scale) +
         mismatches(download<float>(b.k_mean, H * kHeadDim), ref.k_mean);
}

template <typename Ref>
void compare(const std::vector<float>& got, const Ref& ref, double* rel_l2, double* cosine) {
  PairSums s;
  for (size_t i = 0; i < got.size(); ++i) s.add(ref[i], got[i]);
  *rel_l2 = s.rel_l2();
  if (cosine) *cosine = s.cosine();
}

}  // namespace

SageSelftest run_sage_selftest(int64_t seq, int64_t heads, uint64_t seed) {
  SageSelftest r;
  r.variant = sage_variant_name(sage_resolve_variant(SageVariant::automatic));
  r.seq = seq, r.heads = heads;
  const int64_t hd = heads * kHeadDim, stride = 3 * hd + 64;             // a padded QKV row
  std::vector<uint16_t> qkv(static_cast<size_t>(seq * stride), 0x7fc0);  // NaN in the gap
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t c = 0; c < 3 * hd; ++c) qkv[t * stride + c] = f32_to_bf16(n01(g));

  const size_t buf_bytes = sage_buffer_bytes(seq, heads);
  auto d_qkv = device_alloc(qkv.size() * 2, 0), d_buf = device_alloc(buf_bytes, 0),
       d_out = device_alloc(static_cast<size_t>(seq * hd * 2), 0);
  H3RT_CUDA_CHECK(cudaMemcpy(d_qkv.get(), qkv.data(), qkv.size() * 2, cudaMemcpyHostToDevice));
  H3RT_CUDA_CHECK(cudaMemset(d_buf.get(), 0, buf_bytes));  // the tickets start at zero
  const SageBuffers b = sage_buffers(d_buf.get(), seq, heads);
  SagePrepassParams pp;
  pp.qkv = d_qkv.get(), pp.row_stride = stride, pp.seq = seq, pp.heads = heads;
  pp.sm_scale = kSmScale, pp.buf = b;
  H3RT_CUDA_CHECK(sage_prepass(pp, nullptr));
  SageAttentionParams ap;
  ap.buf = b, ap.seq = seq, ap.heads = heads, ap.out = d_out.get(), ap.out_row_stride = hd;
  H3RT_CUDA_CHECK(sage_attention(ap, nullptr));
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());

  const QkvView view{qkv.data(), seq, heads, stride};
  const Quantized ref = quantize_reference(view, kSmScale);
  r.prepass_mismatches = prepass_mismatches(b, ref);
  const std::vector<uint16_t> out = download<uint16_t>(d_out.get(), seq * hd);
  std::vector<float> got(out.size());
  for (size_t i = 0; i < got.size(); ++i) {
    got[i] = bf16_to_f32(out[i]);
    r.non_finite += !std::isfinite(got[i]);
  }
  if (r.non_finite) return r;
  if (seq > kSampledFrom) {
    // The first two and last two rows, both sides of the 64- and 192-row tile edges near the
    // start, the middle one, the rest drawn: 32 rows.
    const std::vector<int64_t> rows =
        spot_rows(seq, {0, 1, 63, 64, 191, 192, seq / 2, seq - 2, seq - 1}, 32, g);
    std::vector<float> picked;
    for (int64_t t : rows) picked.insert(picked.end(), &got[t * hd], &got[(t + 1) * hd]);
    compare(picked, attention_reference_rows(ref, rows, RowSum::p8), &r.rel_l2_sage, nullptr);
    r.rows_checked = static_cast<int64_t>(rows.size());
    r.exact_checked = false;
    return r;
  }
  r.rows_checked = seq;
  const std::vector<double> exact = attention_exact_f64(view, kSmScale);
  const std::vector<float> sage = attention_reference(ref, RowSum::p8);  // the kernels' form
  compare(got, sage, &r.rel_l2_sage, nullptr);
  compare(got, exact, &r.rel_l2_exact, &r.cosine_exact);
  compare(sage, exact, &r.ref_rel_l2_exact, nullptr);
  return r;
}

}  // namespace h3rt::attention_sage
