// Host reference of int8 W8A8 linears (h3rt/int8.h): rotation, row quantization, the int8 GEMM.
#include "h3rt/int8.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "h3rt/formats.h"

namespace h3rt {

namespace {

void check_rows_input(const Tensor& a, const char* what) {
  H3RT_CHECK(a.device() == Device::cpu && a.dim() == 2 && a.stride(1) == 1, what,
             ": expected a 2-D host tensor with unit column stride, got ", shape_str(a.shape()));
  H3RT_CHECK(a.dtype() == DType::bf16 || a.dtype() == DType::f32, what,
             ": expected bf16 or f32, got ", dtype_name(a.dtype()));
}

// Row r of a bf16/f32 tensor as bf16 values (f32 rounded to bf16).
void load_bf16_row(const Tensor& a, int64_t r, float* out) {
  const int64_t k = a.size(1);
  if (a.dtype() == DType::bf16) {
    const uint16_t* p = a.ptr<uint16_t>() + r * a.stride(0);
    for (int64_t c = 0; c < k; ++c) out[c] = bf16_to_f32(p[c]);
  } else {
    const float* p = a.ptr<float>() + r * a.stride(0);
    for (int64_t c = 0; c < k; ++c) out[c] = round_bf16(p[c]);
  }
}

// log2(sqrt(g)) for a valid group size.
int half_log2(int64_t g) {
  int m = 0;
  while ((int64_t{1} << (2 * m)) < g) ++m;
  return m;
}

// rne to an integer, clamped to int8.
int8_t to_int8(float v) {
  const float r = std::nearbyint(v);  // default rounding mode: to nearest, ties to even
  return static_cast<int8_t>(std::clamp(r, -128.0f, 127.0f));
}

float amax_of(const float* v, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
  return amax;
}

float scale_for(float amax) {
  return std::max(amax / 127.0f, 1e-30f);
}

// q = clamp(rne(bf16(v / bf16(s)))) for n bf16 values.
void quantize_values(const float* v, int64_t n, float s, int8_t* q) {
  const float sb = round_bf16(s);
  for (int64_t c = 0; c < n; ++c) q[c] = to_int8(round_bf16(v[c] / sb));
}

}  // namespace

bool convrot_group_valid(int64_t g) {
  if (g < 4) return false;
  while (g % 4 == 0) g /= 4;
  return g == 1;
}

int hadamard_sign(int64_t i, int64_t j) {
  int s = 1;
  for (; i > 0 || j > 0; i /= 4, j /= 4)
    if (i % 4 + j % 4 == 3) s = -s;  // H4[a][b] = -1 exactly on the anti-diagonal
  return s;
}

// Radix-4 butterflies along each base-4 digit of the index: the Kronecker power of H4 applied
// one factor at a time. In double every partial sum of bf16 inputs is exact (their exponents
// would have to span more than 2^44 within one group to lose a bit), so the result is the exact
// rotation rounded once.
void hadamard_rotate_rows(const float* x, float* y, int64_t rows, int64_t k, int64_t g) {
  H3RT_CHECK(convrot_group_valid(g), "convrot group size ", g, " is not a power of 4 (>= 4)");
  H3RT_CHECK(k % g == 0, "convrot group size ", g, " does not divide the ", k, " input features");
  const double inv = std::ldexp(1.0, -half_log2(g));
  std::vector<double> a(static_cast<size_t>(g));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t base = 0; base < k; base += g) {
      const float* in = x + r * k + base;
      for (int64_t i = 0; i < g; ++i) a[i] = in[i];
      for (int64_t s = 1; s < g; s *= 4)
        for (int64_t blk = 0; blk < g; blk += 4 * s)
          for (int64_t t = blk; t < blk + s; ++t) {
            const double a0 = a[t], a1 = a[t + s], a2 = a[t + 2 * s], a3 = a[t + 3 * s];
            a[t] = a0 + a1 + a2 - a3;
            a[t + s] = a0 + a1 - a2 + a3;
            a[t + 2 * s] = a0 - a1 + a2 + a3;
            a[t + 3 * s] = -a0 + a1 + a2 + a3;
          }
      float* out = y + r * k + base;
      for (int64_t j = 0; j < g; ++j) out[j] = static_cast<float>(a[j] * inv);
    }
}

Int8Rows int8_quantize_rows(const Tensor& a, int64_t group) {
  check_rows_input(a, "int8 quantize");
  const int64_t rows = a.size(0), k = a.size(1);
  std::vector<float> v(static_cast<size_t>(k)), rot(static_cast<size_t>(k));
  Int8Rows out{Tensor::zeros(DType::i8, {rows, k}), Tensor::zeros(DType::f32, {rows, 1})};
  for (int64_t r = 0; r < rows; ++r) {
    load_bf16_row(a, r, v.data());
    if (group > 0) {
      hadamard_rotate_rows(v.data(), rot.data(), 1, k, group);
      for (int64_t c = 0; c < k; ++c) v[c] = round_bf16(rot[c]);
    }
    const float s = scale_for(amax_of(v.data(), k));
    quantize_values(v.data(), k, s, out.q.ptr<int8_t>() + r * k);
    out.scale.ptr<float>()[r] = s;
  }
  return out;
}

Int8Rows int8_quantize_tensor(const Tensor& a) {
  check_rows_input(a, "int8 quantize (tensorwise)");
  const int64_t rows = a.size(0), k = a.size(1);
  std::vector<float> v(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r) load_bf16_row(a, r, v.data() + r * k);
  const float s = scale_for(amax_of(v.data(), rows * k));
  Int8Rows out{Tensor::zeros(DType::i8, {rows, k}), tensor_from_f32({s}, {})};
  quantize_values(v.data(), rows * k, s, out.q.ptr<int8_t>());
  return out;
}

std::vector<float> int8_row_scales(const Tensor& w_scale, int64_t n) {
  H3RT_CHECK(w_scale.dtype() == DType::f32, "int8 weight_scale has dtype ",
             dtype_name(w_scale.dtype()), ", expected f32");
  const std::vector<float> s = w_scale.to_f32();
  const bool scalar = s.size() == 1 && w_scale.dim() <= 1;
  const bool per_row = static_cast<int64_t>(s.size()) == n &&
                       (w_scale.dim() == 1 || (w_scale.dim() == 2 && w_scale.size(1) == 1));
  H3RT_CHECK(scalar || per_row, "int8 weight_scale has shape ", shape_str(w_scale.shape()),
             ", expected [], [1], [", n, "] or [", n, ", 1]");
  return scalar ? std::vector<float>(static_cast<size_t>(n), s[0]) : s;
}

Tensor int8_linear(const Int8Rows& x, const Tensor& wq, const Tensor& w_scale, const Tensor* bias) {
  const int64_t m = x.q.size(0), k = x.q.size(1), n = wq.size(0);
  H3RT_CHECK(wq.dtype() == DType::i8 && wq.dim() == 2 && wq.size(1) == k, "int8 linear: weight is ",
             dtype_name(wq.dtype()), " ", shape_str(wq.shape()), ", expected i8 [", n, ", ", k,
             "]");
  const std::vector<float> sw = int8_row_scales(w_scale, n);
  std::vector<float> b;
  if (bias) {
    H3RT_CHECK(bias->numel() == n, "int8 linear: bias has ", bias->numel(), " values, expected ",
               n);
    b = bias->to_f32();
  }
  const Tensor xq = x.q.contiguous_copy(), w = wq.contiguous_copy();
  Tensor y = Tensor::zeros(DType::bf16, {m, n});
  for (int64_t i = 0; i < m; ++i) {
    const int8_t* xr = xq.ptr<int8_t>() + i * k;
    const float sx = x.scale.ptr<float>()[i];
    for (int64_t j = 0; j < n; ++j) {
      const int8_t* wr = w.ptr<int8_t>() + j * k;
      int32_t acc = 0;
      for (int64_t c = 0; c < k; ++c) acc += int32_t{xr[c]} * int32_t{wr[c]};
      float v = round_bf16(static_cast<float>(acc) * (sx * sw[j]));
      if (bias) v = round_bf16(v + round_bf16(b[j]));
      y.ptr<uint16_t>()[i * n + j] = f32_to_bf16(v);
    }
  }
  return y;
}

Tensor int8_dequantize_weight(const Tensor& wq, const Tensor& w_scale, int64_t group) {
  H3RT_CHECK(wq.dtype() == DType::i8 && wq.dim() == 2, "int8 weight is ", dtype_name(wq.dtype()),
             " ", shape_str(wq.shape()), ", expected i8 [n, k]");
  const int64_t n = wq.size(0), k = wq.size(1);
  const std::vector<float> s = int8_row_scales(w_scale, n);
  const Tensor q = wq.contiguous_copy();
  Tensor out = Tensor::zeros(DType::f32, {n, k});
  float* o = out.ptr<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) o[r * k + c] = q.ptr<int8_t>()[r * k + c] * s[r];
  if (group > 0) {
    std::vector<float> tmp(o, o + n * k);
    hadamard_rotate_rows(tmp.data(), o, n, k, group);
  }
  return out;
}

}  // namespace h3rt
