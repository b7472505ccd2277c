// Byte model of the fused NVFP4 producers (see nvfp4_fusion_bytes.h).
#include "bench/nvfp4_fusion_bytes.h"

#include "h3rt/check.h"

namespace h3rt::bench {
namespace {

Nvfp4BoundaryBytes boundary(std::string name, int64_t rows, int64_t cols, int64_t reread,
                            bool computed_fused) {
  const int64_t n = rows * cols;
  Nvfp4BoundaryBytes b;
  b.name = std::move(name);
  b.rows = rows;
  b.cols = cols;
  b.bf16_write = 2 * n;
  b.quant_read_given = 2 * n;
  b.quant_read_two_pass = 4 * n;
  b.producer_reread = computed_fused ? reread : 0;
  b.computed_fused = computed_fused;
  b.saved_given = b.bf16_write + b.quant_read_given;
  b.saved_computed = computed_fused ? b.bf16_write + b.quant_read_two_pass - b.producer_reread : 0;
  return b;
}

}  // namespace

Nvfp4FusionBytes nvfp4_fusion_bytes(const Nvfp4FusionShape& s) {
  H3RT_CHECK(s.rows >= 0 && s.hidden > 0 && s.heads > 0 && s.head_dim > 0 && s.ffn > 0,
             "nvfp4_fusion_bytes: bad shape");
  const int64_t inner = s.heads * s.head_dim;
  Nvfp4FusionBytes r;
  // rmsnorm_modulate pass 2 re-reads x [rows, hidden]; swiglu re-reads [rows, 2 * ffn].
  r.boundaries.push_back(
      boundary("norm1_modulate->qkv", s.rows, s.hidden, 2 * s.rows * s.hidden, true));
  r.boundaries.push_back(
      boundary("residual_norm2_modulate->fc1", s.rows, s.hidden, 2 * s.rows * s.hidden, true));
  r.boundaries.push_back(boundary("attention->out_proj", s.rows, inner, 0, false));
  r.boundaries.push_back(boundary("swiglu->fc2", s.rows, s.ffn, 2 * s.rows * 2 * s.ffn, true));
  for (const auto& b : r.boundaries) {
    r.saved_given += b.saved_given;
    r.saved_computed += b.saved_computed;
  }
  return r;
}

}  // namespace h3rt::bench
