#include <algorithm>
#include <vector>

#include "core/env.h"
#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "formats/nvfp4_quantize.h"
#include "h3rt/formats.h"
#include "model/block_cuda.h"
#include "model/weight_stream_plan.h"
#include "ops/attention/attention.h"
#include "ops/fp8_quantize/fp8_quantize.h"
#include "ops/gated_residual/gated_residual.h"
#include "ops/int8_linear/int8_linear.h"
#include "ops/linear/linear.h"
#include "ops/linear_nvfp4/linear_nvfp4.h"
#include "ops/qk_norm_rope/qk_norm_rope.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"
#include "ops/swiglu/swiglu.h"

namespace h3rt::model {
namespace {

using bf16 = __nv_bfloat16;

bf16* bp(const Tensor& t) {
  return t.ptr<bf16>();
}

// NVFP4 W4A4 GEMM of the activation already packed in b.x4 (global scale at `a_global`).
void gemm_nvfp4(const DeviceLinear& l, const float* a_global, bf16* y, int64_t rows,
                BlockCudaBuffers& b, cudaStream_t s) {
  ops::LinearNvfp4CudaParams g;
  g.a_q = b.x4.ptr<uint8_t>();
  g.a_scales = b.x4_scales.ptr<uint8_t>();
  g.a_global = a_global;
  g.w_q = l.w4.ptr<uint8_t>();
  g.w_scales = l.w4_scales.ptr<uint8_t>();
  g.w_global = l.w4_global.ptr<float>();
  g.y = y;
  g.rows = rows;
  g.in = l.in;
  g.out = l.out;
  g.workspace = b.gemm_workspace.data();
  g.workspace_bytes = b.gemm_workspace.nbytes();
  H3RT_CHECK(ops::linear_nvfp4_workspace_bytes(g) <= g.workspace_bytes,
             "nvfp4 GEMM scratch too small for ", rows, " x ", l.in, " -> ", l.out);
  H3RT_CUDA_CHECK(ops::linear_nvfp4_cuda(g, s));
}

// Whether the producer of an NVFP4 layer's input encodes it itself. Only with a static input
// scale: with a computed one the fused producers run twice (amax pass, encode pass), which the
// H200 measured 10-21% slower than producing bf16 and quantizing it (bench/RESULTS.md).
bool fused_input(const DeviceLinear& l) {
  return l.nvfp4() && l.x4_global.data() != nullptr;
}

// The NVFP4 output block a producer fills for layer `l` (fused_input(l) must hold).
Nvfp4Out nvfp4_input(const DeviceLinear& l, BlockCudaBuffers& b) {
  Nvfp4Out o;
  o.qdata = b.x4.ptr<uint8_t>();
  o.scales = b.x4_scales.ptr<uint8_t>();
  o.global_scale = l.x4_global.ptr<float>();
  o.source = Nvfp4GlobalScaleSource::kGiven;
  return o;
}

// NVFP4 W4A4 from a bf16 activation: quantize (given or computed global scale), then the GEMM.
void project_nvfp4(const DeviceLinear& l, const bf16* x, bf16* y, int64_t rows, BlockCudaBuffers& b,
                   cudaStream_t s) {
  H3RT_CHECK(b.x4.data() != nullptr, "nvfp4 layer without nvfp4 activation buffers");
  const bool given = l.x4_global.data() != nullptr;
  Nvfp4QuantizeParams q;
  q.x = x;
  q.rows = rows;
  q.cols = l.in;
  q.ld = l.in;
  q.qdata = b.x4.ptr<uint8_t>();
  q.scales = b.x4_scales.ptr<uint8_t>();
  q.global_scale = given ? l.x4_global.ptr<float>() : b.x4_global.ptr<float>();
  q.source = given ? Nvfp4GlobalScaleSource::kGiven : Nvfp4GlobalScaleSource::kTwoPass;
  q.rule = Nvfp4ScaleRule::kBf16Activation;
  q.workspace = b.x4_workspace.data();
  H3RT_CUDA_CHECK(nvfp4_quantize(q, s));
  gemm_nvfp4(l, q.global_scale, y, rows, b, s);
}

}  // namespace

void int8_gemm_cuda(const DeviceLinear& l, const Int8Activation& a, bf16* y, int64_t rows,
                    cudaStream_t s) {
  ops::Int8LinearCudaParams g;
  g.x = a.q;
  g.x_scale = a.scale;
  g.w = l.wi8.ptr<int8_t>();
  g.w_scale = l.wi8_scale.ptr<float>();
  g.bias = l.b.data() ? bp(l.b) : nullptr;
  g.y = y;
  g.rows = rows;
  g.in = l.in;
  g.out = l.out;
  g.workspace = a.workspace;
  g.workspace_bytes = a.workspace_bytes;
  H3RT_CHECK(ops::int8_linear_workspace_bytes(rows, l.out) <= g.workspace_bytes,
             "int8 GEMM scratch too small for ", rows, " x ", l.in, " -> ", l.out);
  H3RT_CUDA_CHECK(ops::int8_linear_cuda(g, s));
}

void int8_project_cuda(const DeviceLinear& l, const bf16* x, bf16* y, int64_t rows,
                       const Int8Activation& a, cudaStream_t s) {
  ops::Int8QuantizeCudaParams q;
  q.x = x;
  q.q = a.q;
  q.scale = a.scale;
  q.rows = rows;
  q.k = l.in;
  q.group = l.int8_group;
  H3RT_CUDA_CHECK(ops::int8_quantize_rows_cuda(q, s));
  int8_gemm_cuda(l, a, y, rows, s);
}

Int8Activation int8_activation(BlockCudaBuffers& b) {
  H3RT_CHECK(b.xi8.data() != nullptr, "int8 layer without int8 activation buffers");
  return {b.xi8.ptr<int8_t>(), b.xi8_scale.ptr<float>(), b.int8_workspace.data(),
          static_cast<size_t>(b.int8_workspace.nbytes())};
}

namespace {

// int8 W8A8 GEMM of the activation already rotated and quantized in b.xi8 / b.xi8_scale.
void gemm_int8(const DeviceLinear& l, bf16* y, int64_t rows, BlockCudaBuffers& b, cudaStream_t s) {
  int8_gemm_cuda(l, int8_activation(b), y, rows, s);
}

// int8 W8A8: rotate + quantize the activation rows, then the int8 GEMM with both scales.
void project_int8(const DeviceLinear& l, const bf16* x, bf16* y, int64_t rows, BlockCudaBuffers& b,
                  cudaStream_t s) {
  int8_project_cuda(l, x, y, rows, int8_activation(b), s);
}

// Whether the inputs of int8 layers are rotated and quantized by their producers where the shape
// and device allow (rmsnorm_modulate for qkv / fc1, the swiglu table path for fc2): yes unless
// H3RT_INT8_FUSE=0 (the unfused path, kept for side-by-side benchmarks; the bytes are the same
// either way). H3RT_INT8_FUSE_FC2=0 leaves only fc2's input unfused. The out input always takes
// the standalone quantizer (the attention epilogue would need a row's amax across CTAs).
bool int8_fusion_on() {
  return env_switch("H3RT_INT8_FUSE", true);
}

// The fc2 input's fusion predicate: the swiglu table path's, unless H3RT_INT8_FUSE_FC2=0.
bool fc2_int8_fusable(int64_t ffn, int group) {
  return env_switch("H3RT_INT8_FUSE_FC2", true) && ops::swiglu_int8_fusable(ffn, group);
}

// Whether the producer of int8 layer l's input rotates and quantizes it (`fusable`: the
// producer's width/group predicate).
bool int8_fused_input(const DeviceLinear& l, bool (*fusable)(int64_t, int)) {
  return l.int8() && int8_fusion_on() && fusable(l.in, l.int8_group);
}

// The int8 output block a producer fills for layer `l`.
ops::Int8Out int8_input(const DeviceLinear& l, BlockCudaBuffers& b) {
  ops::Int8Out o;
  o.q = b.xi8.ptr<int8_t>();
  o.scale = b.xi8_scale.ptr<float>();
  o.group = l.int8_group;
  return o;
}

// Whether the producer of fp8 layer l's input writes it in e4m3 itself (a static input scale):
// the default since FusedE4m3.* passed (bit-identical; the fp8 block 1.2% faster on an H100,
// RESULTS session 18); H3RT_FP8_FUSE=0 keeps the unfused path for side-by-side runs.
bool e4m3_fused_input(const DeviceLinear& l) {
  return l.fp8() && !l.fp8_dynamic() && env_switch("H3RT_FP8_FUSE", true);
}

// The e4m3 output block a producer fills for layer `l` (e4m3_fused_input(l) must hold).
ops::E4m3Out e4m3_input(const DeviceLinear& l, BlockCudaBuffers& b) {
  H3RT_CHECK(b.x8.data() != nullptr, "fp8 layer without fp8 activation buffers");
  ops::E4m3Out o;
  o.q = b.x8.ptr<__nv_fp8_e4m3>();
  o.scale = l.x_scale.ptr<float>();
  return o;
}

// The fp8 GEMM of the e4m3 activation already in b.x8, with activation scale x_scale.
void gemm_fp8(const DeviceLinear& l, const float* x_scale, bf16* y, int64_t rows,
              BlockCudaBuffers& b, cudaStream_t s) {
  ops::LinearFp8CudaParams g;
  g.x = b.x8.ptr<__nv_fp8_e4m3>();
  g.w = l.w8.ptr<__nv_fp8_e4m3>();
  g.x_scale = x_scale;
  g.w_scale = l.w_scale.ptr<float>();
  g.y = y;
  g.rows = rows;
  g.in = l.in;
  g.out = l.out;
  H3RT_CUDA_CHECK(ops::linear_fp8_cuda(g, s));
}

// y = x W^T through the layer's path: bf16 GEMM, e4m3 quantize + fp8 GEMM, int8, or NVFP4.
void project(const DeviceLinear& l, const bf16* x, bf16* y, int64_t rows, BlockCudaBuffers& b,
             cudaStream_t s) {
  if (l.nvfp4()) return project_nvfp4(l, x, y, rows, b, s);
  if (l.int8()) return project_int8(l, x, y, rows, b, s);
  if (!l.fp8()) {
    H3RT_CUDA_CHECK(ops::linear_bf16_cuda({x, bp(l.w), nullptr, y, rows, l.in, l.out}, s));
    return;
  }
  H3RT_CHECK(b.x8.data() != nullptr, "fp8 layer without fp8 activation buffers");
  auto* x8 = b.x8.ptr<__nv_fp8_e4m3>();
  const float* x_scale = l.x_scale.ptr<float>();
  if (l.fp8_dynamic()) {  // s computed on the device from this activation, read by the GEMM
    H3RT_CHECK(b.x8_scale.data() && b.x8_workspace.data(),
               "fp8 layer with dynamic activation scales but no scale buffers");
    ops::Fp8QuantizeCudaParams q;
    q.x = x;
    q.q = x8;
    q.rows = rows;
    q.cols = l.in;
    q.scale = b.x8_scale.ptr<float>();
    q.workspace = b.x8_workspace.data();
    H3RT_CUDA_CHECK(ops::fp8_quantize_dynamic_cuda(q, s));
    x_scale = q.scale;
  } else {
    ops::QuantizeE4m3CudaParams q{x, x8, x_scale, rows, l.in};
    H3RT_CUDA_CHECK(ops::quantize_e4m3_cuda(q, s));
  }
  gemm_fp8(l, x_scale, y, rows, b, s);
}

// The projection of an input its producer either encoded itself (`encoded`: NVFP4 in b.x4,
// int8 in b.xi8 or e4m3 in b.x8, by the layer's format) or wrote in bf16 to x.
void project_input(const DeviceLinear& l, bool encoded, const bf16* x, bf16* y, int64_t rows,
                   BlockCudaBuffers& b, cudaStream_t s) {
  if (encoded && l.int8()) return gemm_int8(l, y, rows, b, s);
  if (encoded && l.fp8()) return gemm_fp8(l, l.x_scale.ptr<float>(), y, rows, b, s);
  if (encoded) return gemm_nvfp4(l, l.x4_global.ptr<float>(), y, rows, b, s);
  project(l, x, y, rows, b, s);
}

// Sets a producer's fused output for layer l (NVFP4 or e4m3 with a static scale, or int8
// convrot where `fusable` holds and fusion is on); returns whether the producer encodes l's input
// itself.
template <class P>
bool fuse_input(const DeviceLinear& l, BlockCudaBuffers& b, P& params,
                bool (*fusable)(int64_t, int)) {
  if (fused_input(l)) {
    params.nvfp4 = nvfp4_input(l, b);
    return true;
  }
  if (e4m3_fused_input(l)) {
    params.e4m3 = e4m3_input(l, b);
    return true;
  }
  if (int8_fused_input(l, fusable)) {
    params.int8 = int8_input(l, b);
    return true;
  }
  return false;
}

// Scratch of the nvfp4 GEMMs of a block at `rows`: the largest any projection shape needs.
size_t nvfp4_gemm_scratch(const H3Config& c, int64_t rows) {
  const int64_t H = c.hidden, I = c.inner(), F = c.ffn;
  const int64_t shapes[4][2] = {{3 * I, H}, {H, I}, {2 * F, H}, {H, F}};  // out, in
  size_t most = 0;
  for (const auto& sh : shapes) {
    ops::LinearNvfp4CudaParams g;
    g.a_q = reinterpret_cast<const uint8_t*>(1);  // W4A4 (only the shape matters)
    g.rows = rows;
    g.out = sh[0];
    g.in = sh[1];
    most = std::max(most, ops::linear_nvfp4_workspace_bytes(g));
  }
  return most;
}

void stage(const StageHook* hook, const char* name) {
  if (hook) (*hook)(name);
}

}  // namespace

std::vector<std::string> fused_projection_inputs(const DeviceBlock& w) {
  std::vector<std::string> names;
  const auto int8_fused = int8_fused_input;
  const auto by_norm = [&](const DeviceLinear& l) {
    return fused_input(l) || e4m3_fused_input(l) ||
           int8_fused(l, ops::rmsnorm_modulate_int8_fusable);
  };
  if (by_norm(w.qkv)) names.push_back("qkv");
  if (fused_input(w.out)) names.push_back("out");
  if (by_norm(w.fc1)) names.push_back("fc1");
  if (fused_input(w.fc2) || e4m3_fused_input(w.fc2) || int8_fused(w.fc2, fc2_int8_fusable))
    names.push_back("fc2");
  return names;
}

BlockCudaBuffers make_block_buffers(const H3Config& c, int64_t rows, int64_t table_rows, bool fp8,
                                    bool nvfp4, ops::AttentionKernel attention, bool int8) {
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
  b.silu_table = cuda::device_empty(DType::bf16, {ops::kSiluTableEntries});
  H3RT_CUDA_CHECK(ops::swiglu_silu_table_cuda(bp(b.silu_table), nullptr));
  b.table = cuda::device_empty(DType::bf16, {table_rows, 6 * c.hidden});
  b.row_index = cuda::device_empty(DType::i64, {rows});
  b.cos = cuda::device_empty(DType::f32, {rows, c.rope_dim()});
  b.sin = cuda::device_empty(DType::f32, {rows, c.rope_dim()});
  const int64_t widest = std::max({c.hidden, I, c.ffn});
  if (fp8) {
    b.x8 = cuda::device_empty(DType::e4m3, {rows, widest});
    b.x8_scale = cuda::device_empty(DType::f32, {1});
    b.x8_workspace = cuda::device_empty(DType::u8, {int64_t(ops::fp8_quantize_workspace_bytes())});
  }
  if (int8) {
    // The scratch depends on the output width through its row chunking: the most any of the
    // four projections needs (the int8 layers around the blocks, io_int8_cuda.h, output H or
    // less and read at most max(text_dim, H, 96, audio_channels) features).
    size_t scratch = 1;
    for (int64_t out : {3 * I, c.hidden, 2 * c.ffn})
      scratch = std::max(scratch, ops::int8_linear_workspace_bytes(rows, out));
    b.xi8 = cuda::device_empty(DType::i8, {rows, int8_activation_width(c)});
    b.xi8_scale = cuda::device_empty(DType::f32, {rows});
    b.int8_workspace = cuda::device_empty(DType::u8, {int64_t(scratch)});
  }
  if (nvfp4) {
    b.x4 = cuda::device_empty(DType::u8, {rows, widest / 2});
    b.x4_scales = cuda::device_empty(DType::u8, {nvfp4_scales_bytes(rows, widest)});
    b.x4_global = cuda::device_empty(DType::f32, {1});
    b.x4_workspace = cuda::device_empty(DType::u8, {int64_t(nvfp4_quantize_workspace_bytes())});
    H3RT_CUDA_CHECK(cudaMemset(b.x4_workspace.data(), 0, b.x4_workspace.nbytes()));
    b.gemm_workspace = cuda::device_empty(DType::u8, {int64_t(nvfp4_gemm_scratch(c, rows))});
  }
  b.attention = attention;
  const ops::AttentionCudaParams at =
      ops::attention_params_from_qkv(bp(b.qkv), rows, c.heads, bp(b.attn));
  const size_t aws = ops::attention_workspace_bytes(at, attention);
  if (aws) {
    b.attention_workspace = cuda::device_empty(DType::u8, {int64_t(aws)});
    H3RT_CUDA_CHECK(cudaMemset(b.attention_workspace.data(), 0, aws));
  }
  return b;
}

void ensure_sparse_buffers(BlockCudaBuffers& b) {
  if (b.sparse_workspace.data()) return;
  const size_t bytes = ops::attention_sparse_workspace_bytes(b.rows, b.heads);
  b.sparse_workspace = cuda::device_empty(DType::u8, {int64_t(bytes)});
  b.sparse_stats = cuda::device_empty(DType::u8, {2 * int64_t(sizeof(unsigned long long))});
  H3RT_CUDA_CHECK(cudaMemset(b.sparse_stats.data(), 0, b.sparse_stats.nbytes()));
}

void gate_mlp_residual_cuda(const H3Config& c, BlockCudaBuffers& b, const bf16* table,
                            cudaStream_t s) {
  ops::GatedResidualCudaParams gr;
  gr.x = bp(b.x);
  gr.y = bp(b.y);
  gr.gate = table ? table + 5 * c.hidden : nullptr;
  gr.row_table_index = table ? b.row_index.ptr<const int64_t>() : nullptr;
  gr.rows = b.rows;
  gr.dim = c.hidden;
  gr.table_row_stride = 6 * c.hidden;
  H3RT_CUDA_CHECK(ops::gated_residual_cuda(gr, s));
}

void block_forward_cuda(const H3Config& c, const DeviceBlock& w, BlockCudaBuffers& b,
                        cudaStream_t s, const StageHook* hook, bool refiner,
                        const BlockSparse* sparse, const BlockChain* chain) {
  const int64_t S = b.rows, H = c.hidden, I = c.inner(), F = c.ffn;
  H3RT_CHECK(!chain || !refiner, "block_forward_cuda: refiner blocks do not chain");
  // A refiner block has no modulation table: null shift/scale/gate select plain RMSNorm and
  // ungated residuals in the same kernels.
  const bf16* table = refiner ? nullptr : chain && chain->table ? chain->table : bp(b.table);
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
  ops::RmsNormModulateCudaParams n2 = n1;  // the same rows and table, second half
  if (chain && chain->pending) {           // the previous block's x += gate_mlp * y, then norm1
    n1.residual = bp(b.y);
    n1.residual_gate = chain->pending + 5 * H;
  }
  const bool fused_qkv = fuse_input(w.qkv, b, n1, ops::rmsnorm_modulate_int8_fusable);
  if (fused_qkv) n1.y = nullptr;
  H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(n1, s));
  stage(hook, "norm_modulate");

  project_input(w.qkv, fused_qkv, bp(b.n), bp(b.qkv), S, b, s);
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
  const bool fused_out = fused_input(w.out);
  if (fused_out) {
    at.out = nullptr;
    at.nvfp4 = nvfp4_input(w.out, b);
  }
  at.workspace = b.attention_workspace.data();
  at.workspace_bytes = b.attention_workspace.nbytes();
  if (sparse && sparse->cfg && sparse->cfg->enabled()) {
    H3RT_CHECK(b.sparse_workspace.data(),
               "block_forward_cuda: sparse attention without "
               "ensure_sparse_buffers");
    at.sparse = sparse->cfg;
    at.sparse_prefix_rows = sparse->prefix_rows;
    at.sparse_workspace = b.sparse_workspace.data();
    at.sparse_workspace_bytes = b.sparse_workspace.nbytes();
    at.sparse_stats = static_cast<unsigned long long*>(b.sparse_stats.data());
    at.sparse_dense_heads = sparse->dense_heads;
    if (sparse->check) at.out = bp(b.attn);
  }
  H3RT_CUDA_CHECK(ops::attention_cuda(at, b.attention, s));
  if (at.sparse && sparse->check) {
    H3RT_CHECK(b.h.numel() >= S * I, "block_forward_cuda: the sparse check needs b.h of ", S * I,
               " elements");
    ops::SparseCheckCudaParams chk = *sparse->check;
    chk.dense_out = bp(b.h);
    H3RT_CUDA_CHECK(ops::attention_sparse_check_cuda(at, chk, s));
  }
  stage(hook, "attention");

  project_input(w.out, fused_out, bp(b.attn), bp(b.y), S, b, s);
  stage(hook, "output_projection");

  n2.weight = bp(w.norm2);
  n2.shift = chunk(3);
  n2.scale = chunk(4);
  n2.residual = bp(b.y);
  n2.residual_gate = chunk(2);
  const bool fused_fc1 = fuse_input(w.fc1, b, n2, ops::rmsnorm_modulate_int8_fusable);
  if (fused_fc1) n2.y = nullptr;
  H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(n2, s));
  stage(hook, "residual_gate_norm_modulate");

  project_input(w.fc1, fused_fc1, bp(b.n), bp(b.h), S, b, s);
  stage(hook, "mlp_fc1");

  ops::SwigluCudaParams sw;
  sw.in = bp(b.h);
  sw.out = bp(b.g);
  sw.rows = S;
  sw.ffn = F;
  sw.silu_table = bp(b.silu_table);
  // fc2: NVFP4 or e4m3 (static scales), int8 through the table path where it fits.
  const bool fused_fc2 = fuse_input(w.fc2, b, sw, fc2_int8_fusable);
  if (fused_fc2) sw.out = nullptr;
  H3RT_CUDA_CHECK(ops::swiglu_cuda(sw, s));
  stage(hook, "swiglu");

  project_input(w.fc2, fused_fc2, bp(b.g), bp(b.y), S, b, s);
  stage(hook, "mlp_fc2");

  if (chain && chain->defer) return;  // the next block's norm1 adds it
  gate_mlp_residual_cuda(c, b, table, s);
  stage(hook, "residual_gates");
}

}  // namespace h3rt::model
