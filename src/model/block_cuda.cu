#include <algorithm>
#include <vector>

#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "h3rt/formats.h"
#include "model/block_cuda.h"
#include "ops/attention/attention.h"
#include "ops/gated_residual/gated_residual.h"
#include "ops/linear/linear.h"
#include "ops/qk_norm_rope/qk_norm_rope.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"
#include "ops/swiglu/swiglu.h"

namespace h3rt::model {
namespace {

using bf16 = __nv_bfloat16;

bf16* bp(const Tensor& t) {
  return t.ptr<bf16>();
}

// y = x W^T through the layer's path: bf16 GEMM, or e4m3 quantize + fp8 GEMM.
void project(const DeviceLinear& l, const bf16* x, bf16* y, int64_t rows, BlockCudaBuffers& b,
             cudaStream_t s) {
  if (!l.fp8()) {
    H3RT_CUDA_CHECK(ops::linear_bf16_cuda({x, bp(l.w), nullptr, y, rows, l.in, l.out}, s));
    return;
  }
  H3RT_CHECK(b.x8.data() != nullptr, "fp8 layer without fp8 activation buffers");
  auto* x8 = b.x8.ptr<__nv_fp8_e4m3>();
  ops::QuantizeE4m3CudaParams q{x, x8, l.x_scale.ptr<float>(), rows, l.in};
  H3RT_CUDA_CHECK(ops::quantize_e4m3_cuda(q, s));
  ops::LinearFp8CudaParams g;
  g.x = x8;
  g.w = l.w8.ptr<__nv_fp8_e4m3>();
  g.x_scale = l.x_scale.ptr<float>();
  g.w_scale = l.w_scale.ptr<float>();
  g.y = y;
  g.rows = rows;
  g.in = l.in;
  g.out = l.out;
  H3RT_CUDA_CHECK(ops::linear_fp8_cuda(g, s));
}

void stage(const StageHook* hook, const char* name) {
  if (hook) (*hook)(name);
}

}  // namespace

BlockCudaBuffers make_block_buffers(const H3Config& c, int64_t rows, int64_t table_rows, bool fp8) {
  BlockCudaBuffers b;
  b.rows = rows;
  b.hidden = c.hidden;
  b.heads = c.heads;
  b.ffn = c.ffn;
  const int64_t I = c.inner();
  b.x = cuda::device_empty(DType::bf16, {rows, c.hidden});
  b.n = cuda::device_empty(DType::bf16, {rows, c.hidden});
  b.qkv = cuda::device_empty(DType::bf16, {rows, 3 * I});
  b.attn = cuda::device_empty(DType::bf16, {rows, I});
  b.y = cuda::device_empty(DType::bf16, {rows, c.hidden});
  b.h = cuda::device_empty(DType::bf16, {rows, 2 * c.ffn});
  b.g = cuda::device_empty(DType::bf16, {rows, c.ffn});
  b.table = cuda::device_empty(DType::bf16, {table_rows, 6 * c.hidden});
  b.row_index = cuda::device_empty(DType::i64, {rows});
  b.cos = cuda::device_empty(DType::f32, {rows, c.rope_dim()});
  b.sin = cuda::device_empty(DType::f32, {rows, c.rope_dim()});
  if (fp8) b.x8 = cuda::device_empty(DType::e4m3, {rows, std::max({c.hidden, I, c.ffn})});
  return b;
}

void block_forward_cuda(const H3Config& c, const DeviceBlock& w, BlockCudaBuffers& b,
                        cudaStream_t s, const StageHook* hook, bool refiner) {
  const int64_t S = b.rows, H = c.hidden, I = c.inner(), F = c.ffn;
  // A refiner block has no modulation table: null shift/scale/gate select plain RMSNorm and
  // ungated residuals in the same kernels.
  const bf16* table = refiner ? nullptr : bp(b.table);
  const auto* row_index = refiner ? nullptr : b.row_index.ptr<const int64_t>();
  auto chunk = [&](int64_t k) { return refiner ? nullptr : table + k * H; };

  ops::RmsNormModulateCudaParams n1;
  n1.x = bp(b.x);
  n1.y = bp(b.n);
  n1.weight = bp(w.norm1);
  n1.shift = chunk(0);
  n1.scale = chunk(1);
  n1.row_table_index = row_index;
  n1.rows = S;
  n1.dim = H;
  n1.table_row_stride = 6 * H;
  n1.eps = c.norm_eps;
  H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(n1, s));
  stage(hook, "norm_modulate");

  project(w.qkv, bp(b.n), bp(b.qkv), S, b, s);
  stage(hook, "qkv_projection");

  ops::QkNormRopeCudaParams qk;
  qk.qkv = bp(b.qkv);
  qk.row_stride = 3 * I;
  qk.q_offset = 0;
  qk.k_offset = I;
  qk.rows = S;
  qk.heads = c.heads;
  qk.rope_dim = c.rope_dim();
  qk.q_weight = bp(w.q_norm);
  qk.k_weight = bp(w.k_norm);
  qk.cos = b.cos.ptr<const float>();
  qk.sin = b.sin.ptr<const float>();
  qk.eps = c.qk_norm_eps;
  qk.rope = !refiner;
  H3RT_CUDA_CHECK(ops::qk_norm_rope_cuda(qk, s));
  stage(hook, "rms_rope");

  ops::AttentionCudaParams at = ops::attention_params_from_qkv(bp(b.qkv), S, c.heads, bp(b.attn));
  H3RT_CUDA_CHECK(ops::attention_cuda(at, ops::AttentionKernel::flash_bf16, s));
  stage(hook, "attention");

  project(w.out, bp(b.attn), bp(b.y), S, b, s);
  stage(hook, "output_projection");

  ops::RmsNormModulateCudaParams n2 = n1;
  n2.weight = bp(w.norm2);
  n2.shift = chunk(3);
  n2.scale = chunk(4);
  n2.residual = bp(b.y);
  n2.residual_gate = chunk(2);
  H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(n2, s));
  stage(hook, "residual_gate_norm_modulate");

  project(w.fc1, bp(b.n), bp(b.h), S, b, s);
  stage(hook, "mlp_fc1");

  ops::SwigluCudaParams sw;
  sw.in = bp(b.h);
  sw.out = bp(b.g);
  sw.rows = S;
  sw.ffn = F;
  H3RT_CUDA_CHECK(ops::swiglu_cuda(sw, s));
  stage(hook, "swiglu");

  project(w.fc2, bp(b.g), bp(b.y), S, b, s);
  stage(hook, "mlp_fc2");

  ops::GatedResidualCudaParams gr;
  gr.x = bp(b.x);
  gr.y = bp(b.y);
  gr.gate = chunk(5);
  gr.row_table_index = row_index;
  gr.rows = S;
  gr.dim = H;
  gr.table_row_stride = 6 * H;
  H3RT_CUDA_CHECK(ops::gated_residual_cuda(gr, s));
  stage(hook, "residual_gates");
}

}  // namespace h3rt::model
