// Synthetic device models in the quantized block GEMM formats (synthetic_gemm_cuda.h).
#include <cmath>
#include <optional>

#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "model/lora_cuda.h"
#include "model/synthetic_gemm_cuda.h"
#include "model/weight_stream_cuda.h"
#include "ops/linear/linear.h"

namespace h3rt::model {
namespace {

// A bf16 layer with values in [-wmax, wmax] (the synthetic weights' bound) as fp8_scaled:
// e4m3 weights with w_scale = wmax / 448 and a static activation scale for inputs up to 8; the
// bf16 copy is released.
void make_fp8(DeviceLinear& l, float wmax, cudaStream_t s) {
  l.w_scale = cuda::to_device(tensor_from_f32({wmax / 448.0f}, {1}));
  l.x_scale = cuda::to_device(tensor_from_f32({8.0f / 448.0f}, {1}));
  l.w8 = cuda::device_empty(DType::e4m3, {l.out, l.in});
  ops::QuantizeE4m3CudaParams q{l.w.ptr<__nv_bfloat16>(), l.w8.ptr<__nv_fp8_e4m3>(),
                                l.w_scale.ptr<float>(), l.out, l.in};
  H3RT_CUDA_CHECK(ops::quantize_e4m3_cuda(q, s));
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));
  l.w = Tensor();
}

}  // namespace

void quantize_synthetic_block(DeviceBlock& b, SyntheticGemm format, int int8_group,
                              cudaStream_t s) {
  if (format == SyntheticGemm::bf16) return;
  for (DeviceLinear* l : {&b.qkv, &b.out, &b.fc1, &b.fc2}) {
    if (format == SyntheticGemm::fp8)
      make_fp8(*l, 1.0f / std::sqrt(static_cast<float>(l->in)), s);
    else if (format == SyntheticGemm::int8)
      convert_linear_to_int8(*l, int8_group, s);
    else  // a static activation scale for inputs up to 8, as bench block's
      convert_linear_to_nvfp4(*l, 8.0f / 2688.0f, s);
  }
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));
}

void quantize_synthetic_blocks(DeviceModel& m, SyntheticGemm format, int int8_group,
                               cudaStream_t s) {
  for (DeviceBlock& b : m.blocks) quantize_synthetic_block(b, format, int8_group, s);
}

BlockStorage synthetic_block_storage(const H3Config& c, SyntheticGemm format) {
  LinearStorage s = LinearStorage::bf16;
  if (format == SyntheticGemm::fp8) s = LinearStorage::fp8;
  if (format == SyntheticGemm::int8) s = LinearStorage::int8;
  if (format == SyntheticGemm::nvfp4) s = LinearStorage::nvfp4;
  return uniform_storage(c, s);
}

DeviceModel make_synthetic_gemm_model(const H3Config& c, uint64_t seed, SyntheticGemm format,
                                      int int8_group, const LoadPlan* stream,
                                      BlockwiseLoraMergeCuda* lora, WeightStreamSource source,
                                      const BlockProgress& progress) {
  cuda::Stream s;
  std::optional<BlockImageWriter> images;
  if (stream)
    images.emplace(stream->slot, static_cast<size_t>(c.layers), source, stream->plan.blocks);
  if (progress) progress(0, c.layers);
  DeviceModel m = make_synthetic_device_model(c, seed, [&](size_t i, DeviceBlock& b) {
    if (lora) lora->merge_block(i, b, s);
    quantize_synthetic_block(b, format, int8_group, s);
    if (images && images->streams(i)) images->write(i, b);  // its device memory is freed
    if (progress) progress(static_cast<int64_t>(i) + 1, c.layers);
  });
  if (lora) lora->merge_rest(m, s);
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));
  if (images) m.streamed = images->finish();
  return m;
}

}  // namespace h3rt::model
