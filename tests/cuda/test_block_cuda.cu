// The GPU bf16 block (src/model/block_cuda) on the golden tiny model: block 0 from the CPU bf16
// run's packed input and modulation table, against the float64 reference's block0_out. The GPU
// error must stay within 2x the CPU bf16 reference's own error (FlashAttention-style rule).
// With the 8-bit Sage attention the block's update (output - input) must stay within 10% (relative
// L2) of the flash bf16 block's update.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "../cpu/golden_inputs.h"
#include "cuda_test_util.h"
#include "h3rt/layout.h"
#include "h3rt/model.h"
#include "h3rt/safetensors.h"
#include "model/block_cuda.h"

namespace h3rt {
namespace {

struct Probed {
  std::map<std::string, std::vector<float>> t;
  std::map<std::string, Shape> shape;
};

double max_abs_err(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

struct Block0Run {
  std::vector<float> in, out;  // GPU block input and output (bf16 values)
  double cpu_err = 0, gpu_err = 0;
};

Block0Run run_block0(ops::AttentionKernel attention) {
  const test::GoldenInputs& golden = test::golden_inputs();
  const SafetensorsFile& g = golden.file;
  const SequenceLayout& layout = golden.layout;
  const TimestepPlan& plan = golden.plan;
  H3Model model = load_model(test::golden_dir() + "/weights.safetensors");
  const H3Config& c = model.config;

  Probed p;
  Probe probe = [&](const std::string& name, const float* d, const Shape& s) {
    p.t[name].assign(d, d + shape_numel(s));
    p.shape[name] = s;
  };
  forward_cpu(model, golden.inputs(), Precision::bf16, &probe);
  const int64_t S = layout.seq_len(), H = c.hidden;
  const std::vector<float>& adaln = p.t.at("block0/adaln");  // [6, 3M, H]
  const int64_t table_rows = p.shape.at("block0/adaln")[1];
  std::vector<float> table(table_rows * 6 * H);  // [3M, 6H]: chunk c of row m at c*H
  for (int64_t ch = 0; ch < 6; ++ch)
    for (int64_t m = 0; m < table_rows; ++m)
      for (int64_t j = 0; j < H; ++j)
        table[(m * 6 + ch) * H + j] = adaln[(ch * table_rows + m) * H + j];
  std::vector<int64_t> row_index = adaln_indices(layout, plan);

  cuda::Stream stream;
  model::DeviceBlock w = model::upload_block(model.weights.blocks[0]);
  model::BlockCudaBuffers b = model::make_block_buffers(c, S, table_rows, false, false, attention);
  auto upload = [&](Tensor& dst, const Tensor& host) {
    H3RT_CUDA_CHECK(
        cudaMemcpyAsync(dst.data(), host.data(), host.nbytes(), cudaMemcpyHostToDevice, stream));
  };
  Tensor x_host = tensor_from_f32(p.t.at("packed_input"), {S, H}, DType::bf16);
  Tensor table_host = tensor_from_f32(table, {table_rows, 6 * H}, DType::bf16);
  Tensor cos_host = tensor_from_f32(p.t.at("rope_cos"), {S, c.rope_dim()});
  Tensor sin_host = tensor_from_f32(p.t.at("rope_sin"), {S, c.rope_dim()});
  Tensor idx_host = Tensor::zeros(DType::i64, {S});
  for (int64_t r = 0; r < S; ++r) idx_host.ptr<int64_t>()[r] = row_index[r];
  upload(b.x, x_host);
  upload(b.table, table_host);
  upload(b.cos, cos_host);
  upload(b.sin, sin_host);
  upload(b.row_index, idx_host);
  model::block_forward_cuda(c, w, b, stream);
  stream.synchronize();

  Block0Run r;
  r.in = x_host.to_f32();
  r.out = cuda::to_host(b.x).to_f32();
  const std::vector<double> ref = g.get("fwd_f64/block0_out").to_f64();
  r.cpu_err = max_abs_err(p.t.at("block0_out"), ref);
  r.gpu_err = max_abs_err(r.out, ref);
  for (float v : r.out) EXPECT_TRUE(std::isfinite(v));
  return r;
}

TEST(BlockCuda, GoldenBlock0WithinTwiceCpuBf16Error) {
  H3RT_REQUIRE_GPU();
  const Block0Run r = run_block0(ops::AttentionKernel::flash_bf16);
  RecordProperty("cpu_bf16_max_err", std::to_string(r.cpu_err));
  RecordProperty("gpu_bf16_max_err", std::to_string(r.gpu_err));
  EXPECT_GT(r.cpu_err, 0.0);
  EXPECT_LE(r.gpu_err, 2.0 * r.cpu_err) << "cpu bf16 error " << r.cpu_err;
}

TEST(BlockCuda, SageAttentionBlockTracksFlashBlock) {
  H3RT_REQUIRE_GPU();
  const Block0Run f = run_block0(ops::AttentionKernel::flash_bf16);
  const Block0Run q = run_block0(ops::AttentionKernel::sage_8bit);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < f.out.size(); ++i) {
    const double df = double(f.out[i]) - f.in[i], dq = double(q.out[i]) - q.in[i];
    diff += (dq - df) * (dq - df);
    norm += df * df;
  }
  const double rel = std::sqrt(diff / norm);
  std::printf("sage block 0: update rel L2 vs flash %.4g; max err vs f64 %.4g (flash %.4g)\n", rel,
              q.gpu_err, f.gpu_err);
  EXPECT_GT(norm, 0.0);
  EXPECT_LE(rel, 0.10);
}

}  // namespace
}  // namespace h3rt
