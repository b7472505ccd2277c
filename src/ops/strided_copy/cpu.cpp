#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "ops/strided_copy/strided_copy.h"

namespace h3rt::ops {
namespace {

float load(const void* p, DType t, int64_t i) {
  if (t == DType::f32) return static_cast<const float*>(p)[i];
  return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
}

void store(void* p, DType t, int64_t i, float v) {
  if (t == DType::f32)
    static_cast<float*>(p)[i] = v;
  else
    static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
}

}  // namespace

int64_t StridedCopyParams::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

void strided_copy_cpu(const StridedCopyParams& p) {
  H3RT_CHECK(p.ndim >= 0 && p.ndim <= kStridedCopyMaxDims, "strided_copy: ", p.ndim, " axes");
  for (DType t : {p.src_dtype, p.dst_dtype})
    H3RT_CHECK(t == DType::f32 || t == DType::bf16, "strided_copy: f32 or bf16 only, got ",
               dtype_name(t));
  const int64_t n = p.numel();
  int64_t idx[kStridedCopyMaxDims] = {};
  for (int64_t k = 0; k < n; ++k) {
    int64_t s = 0, d = 0;
    for (int a = 0; a < p.ndim; ++a) s += idx[a] * p.src_strides[a], d += idx[a] * p.dst_strides[a];
    store(p.dst, p.dst_dtype, d, load(p.src, p.src_dtype, s));
    for (int a = p.ndim; a-- > 0;) {
      if (++idx[a] < p.shape[a]) break;
      idx[a] = 0;
    }
  }
}

}  // namespace h3rt::ops
