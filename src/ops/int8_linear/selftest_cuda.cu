// The int8 self-test case on the device (selftest.h): host code over the op's launchers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/spot_check.h"
#include "cuda/runtime.h"
#include "h3rt/device.h"
#include "h3rt/formats.h"
#include "h3rt/int8.h"
#include "ops/int8_linear/int8_linear.h"
#include "ops/int8_linear/selftest.h"

namespace h3rt::ops {
namespace {

// Uniform in [-1, 1) from the top bits of a 64-bit draw (fast enough for 10^8 values).
float uniform_pm1(std::mt19937_64& g) {
  return static_cast<float>(static_cast<double>(g() >> 40) / double(1ull << 23) - 1.0);
}

template <typename T>
std::shared_ptr<void> upload(const std::vector<T>& v) {
  auto d = device_alloc(v.size() * sizeof(T), 0);
  H3RT_CUDA_CHECK(cudaMemcpy(d.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Row r of a device [rows, n] array of T, to the host.
template <typename T>
std::vector<T> row_of(const void* base, int64_t r, int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  H3RT_CUDA_CHECK(cudaMemcpy(v.data(), static_cast<const T*>(base) + r * n, n * sizeof(T),
                             cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace

Int8Selftest run_int8_selftest(int64_t rows, int64_t in, int64_t out, int group, uint64_t seed) {
  Int8Selftest r;
  r.rows = rows, r.in = in, r.out = out, r.group = group;
  std::mt19937_64 g(seed);
  std::vector<uint16_t> x(static_cast<size_t>(rows * in)), bias(static_cast<size_t>(out));
  std::vector<int8_t> w(static_cast<size_t>(out * in));
  std::vector<float> w_scale(static_cast<size_t>(out));
  for (auto& v : x) v = f32_to_bf16(4.0f * uniform_pm1(g));
  for (auto& v : w) v = static_cast<int8_t>(g() % 255) - 127;
  for (auto& v : w_scale) v = (1.0f + 0.5f * uniform_pm1(g)) / (127.0f * 16.0f);
  for (auto& v : bias) v = f32_to_bf16(0.1f * uniform_pm1(g));

  const auto dx = upload(x), dw = upload(w), dws = upload(w_scale), db = upload(bias);
  const auto dq = device_alloc(static_cast<size_t>(rows * in), 0);
  const auto ds = device_alloc(static_cast<size_t>(rows) * 4, 0);
  const auto dy = device_alloc(static_cast<size_t>(rows * out) * 2, 0);
  Int8QuantizeCudaParams qp;
  qp.x = static_cast<const __nv_bfloat16*>(dx.get());
  qp.q = static_cast<int8_t*>(dq.get());
  qp.scale = static_cast<float*>(ds.get());
  qp.rows = rows, qp.k = in, qp.group = group;
  r.quantizer = int8_quantize_path_name(int8_quantize_resolve_path(qp));
  H3RT_CUDA_CHECK(int8_quantize_rows_cuda(qp, nullptr));
  Int8LinearCudaParams lp;
  lp.x = qp.q, lp.x_scale = qp.scale;
  lp.w = static_cast<const int8_t*>(dw.get());
  lp.w_scale = static_cast<const float*>(dws.get());
  lp.bias = static_cast<const __nv_bfloat16*>(db.get());
  lp.y = static_cast<__nv_bfloat16*>(dy.get());
  lp.rows = rows, lp.in = in, lp.out = out;
  lp.workspace_bytes = int8_linear_workspace_bytes(rows, out);
  const auto dwork = device_alloc(std::max<size_t>(lp.workspace_bytes, 1), 0);
  lp.workspace = dwork.get();
  r.gemm = int8_gemm_path_name(int8_linear_resolve_path(lp));
  H3RT_CUDA_CHECK(int8_linear_cuda(lp, nullptr));
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());

  // The first and last rows, both sides of the first 128-row tile edge, the rest drawn.
  const std::vector<int64_t> picked = spot_rows(rows, {0, 127, 128, rows - 1}, 16, g);
  const int64_t n = static_cast<int64_t>(picked.size());
  Tensor xs = Tensor::zeros(DType::bf16, {n, in});
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(xs.ptr<uint16_t>() + i * in, &x[picked[i] * in], in * 2);
  const Int8Rows hq = int8_quantize_rows(xs, group);
  const Tensor wq(w.data(), DType::i8, {out, in}), ws(w_scale.data(), DType::f32, {out}),
      bt(bias.data(), DType::bf16, {out});
  const Tensor hy = int8_linear(hq, wq, ws, &bt);
  for (int64_t i = 0; i < n; ++i) {
    const auto q = row_of<int8_t>(dq.get(), picked[i], in);
    const auto s = row_of<float>(ds.get(), picked[i], 1);
    const auto y = row_of<uint16_t>(dy.get(), picked[i], out);
    r.q_mismatches += byte_mismatches(q.data(), hq.q.ptr<int8_t>() + i * in, in);
    r.scale_mismatches += byte_mismatches(s.data(), hq.scale.ptr<float>() + i, 1);
    r.y_mismatches += byte_mismatches(y.data(), hy.ptr<uint16_t>() + i * out, out);
  }
  r.rows_checked = n;
  return r;
}

}  // namespace h3rt::ops
