// The CPU reference's linear layer, the one place that knows the weight formats: quantized
// layers see their input as the matching GPU path would (W4A4 for nvfp4, e4m3 activations for
// fp8_scaled with a static input_scale, or with a per-call scale when opted in by
// set_fp8_activations), then y = x' W^T + b with the dequantized weight.
#include <cmath>

#include "h3rt/formats.h"
#include "h3rt/int8.h"
#include "h3rt/nvfp4.h"
#include "model/forward_internal.h"
#include "ops/fp8_quantize/fp8_quantize.h"
#include "ops/linear/linear.h"

namespace h3rt::model {

namespace {

float scalar(const Tensor& t) {
  return t.to_f32().at(0);
}

bool present(const Tensor& t) {
  return t.data() != nullptr;
}

// NVFP4 activations, per tensor: g_x = input_scale when the checkpoint has one, else the
// packer's activation rule (Nvfp4ScaleRule::kBf16Activation) on amax|x|; then per-16 block
// scales and e2m1 codes exactly as nvfp4_quantize, dequantized back. In bf16 precision x holds
// bf16 values already; in fp32 precision the same functions see the float values.
FloatVec nvfp4_activation(const LinearWeight& lw, const float* x, int64_t rows) {
  const Tensor xt(const_cast<float*>(x), DType::f32, {rows, lw.in});
  const float g = present(lw.input_scale) ? scalar(lw.input_scale)
                                          : nvfp4_global_scale(xt, Nvfp4ScaleRule::kBf16Activation);
  H3RT_CHECK(std::isfinite(g), "nvfp4 layer '", lw.name, "': activation global scale is ", g,
             " (non-finite input or input_scale)");
  const Nvfp4Tensor q = nvfp4_quantize(xt, g);
  const Tensor d = nvfp4_dequantize(q.qdata, q.scales, g);
  return FloatVec(d.ptr<float>(), d.ptr<float>() + d.numel());
}

// fp8_scaled e4m3 activations: x' = e4m3_satfinite(x / s) * s with the static input_scale s,
// or, on the dynamic path, s = fp8_dynamic_scale(amax|x|) over this call's rows (the GPU's
// fp8_quantize_dynamic rule; x' * w = x8 * w8 * (s * weight_scale) up to the GEMM's rounding).
FloatVec fp8_activation(const LinearWeight& lw, const float* x, int64_t rows) {
  const bool fixed = present(lw.input_scale);
  const float s =
      fixed ? scalar(lw.input_scale) : ops::fp8_dynamic_scale(ops::fp8_absmax_cpu(x, rows, lw.in));
  H3RT_CHECK(fixed || std::isfinite(s), "fp8 layer '", lw.name, "': dynamic activation scale is ",
             s, " (non-finite input)");
  FloatVec out(rows * lw.in);
  for (size_t i = 0; i < out.size(); ++i) out[i] = e4m3_to_f32(f32_to_e4m3_satfinite(x[i] / s)) * s;
  return out;
}

// int8 W8A8 exactly as ComfyUI computes it (h3rt/int8.h): the activation rows, as bf16, rotated
// and quantized per row, the int8 GEMM, the two scales and the bias in the epilogue. The output
// is bf16-valued in both precisions (the layer's own rounding).
FloatVec int8_linear_rows(const LinearWeight& lw, const float* x, int64_t rows) {
  H3RT_CHECK(lw.data.device() == Device::cpu, "layer '", lw.name,
             "': its int8 weights are in device memory; the CPU reference reads host memory");
  const Tensor xt(const_cast<float*>(x), DType::f32, {rows, lw.in});
  const Int8Rows xq = int8_quantize_rows(xt, lw.int8_group);
  const Tensor y =
      int8_linear(xq, lw.data, lw.scale, present(lw.bias_data) ? &lw.bias_data : nullptr);
  const std::vector<float> v = y.to_f32();
  return FloatVec(v.begin(), v.end());
}

bool is_fp8_projection_without_input_scale(const LinearWeight& lw) {
  return lw.format == WeightFormat::fp8_scaled && !present(lw.input_scale) && !lw.full_precision;
}

}  // namespace

FloatVec apply_linear(const LinearWeight& lw, const float* x, int64_t rows, bool round_bf16) {
  if (lw.format == WeightFormat::int8) return int8_linear_rows(lw, x, rows);
  FloatVec xq;  // the quantized-dequantized input, when the format has one
  if (rows > 0 && lw.format == WeightFormat::nvfp4) xq = nvfp4_activation(lw, x, rows);
  if (rows > 0 && lw.format == WeightFormat::fp8_scaled &&
      (present(lw.input_scale) || lw.fp8_dynamic_activations))
    xq = fp8_activation(lw, x, rows);
  FloatVec y(rows * lw.out);
  ops::linear_cpu({.x = xq.empty() ? x : xq.data(),
                   .w = dense_weight(lw).data(),
                   .bias = lw.has_bias() ? lw.b.data() : nullptr,
                   .y = y.data(),
                   .rows = rows,
                   .in = lw.in,
                   .out = lw.out,
                   .round_bf16 = round_bf16});
  return y;
}

}  // namespace h3rt::model

namespace h3rt {

int set_fp8_activations(H3Model& m, Fp8Activations mode) {
  int n = 0;
  auto mark = [&](RefinerBlockWeights& b) {
    for (LinearWeight* l : {&b.attn.qkv, &b.attn.out, &b.mlp.fc1, &b.mlp.fc2}) {
      l->fp8_dynamic_activations =
          mode == Fp8Activations::dynamic && model::is_fp8_projection_without_input_scale(*l);
      n += l->fp8_dynamic_activations;
    }
  };
  for (auto& b : m.weights.refiner) mark(b);
  for (auto& b : m.weights.blocks) mark(b);
  return n;
}

}  // namespace h3rt
