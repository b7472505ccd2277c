// Timing of the CUDA block kernels at a block's real shape (default: the seed workload,
// S = 37,810 rows, H = 5376, 56 heads x 128, F = 14336). CUDA events around each launch,
// warm-up launches first, the median of `iters` timed launches, inputs rotated over several
// buffer sets. Memory-bound kernels report achieved GB/s under the byte model below; GEMMs and
// attention report TFLOP/s.
//
// Byte model (DRAM bytes of one ideal pass; modulation tables, weights and indices are at most
// a few hundred KB per launch and live in L2, so only activations count, plus the fp32 RoPE
// tables): rmsnorm_modulate 2*(S*H) reads+writes of bf16 = 4*S*H; fused residual+rmsnorm reads
// x and the residual, writes x and n = 8*S*H; gated_residual reads x and y, writes x = 6*S*H;
// qk_norm_rope reads and writes q and k = 8*S*I (I = heads*128) plus 2*S*96*4 table bytes;
// swiglu reads 2F and writes F bf16 per row = 6*S*F; quantize_e4m3 reads 2 and writes 1 byte
// per element. The device-to-device copy of 1 GiB (2 bytes moved per byte copied) is measured as
// the practical bandwidth ceiling; memory-bound entries also report their share of it. Kernel
// variants (qk_norm_rope's per-row kernel at each slot count beside its default ring kernel) are
// timed side by side under the same byte model.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace h3rt::bench {

struct BlockKernelsBenchOptions {
  int64_t rows = 37810, hidden = 5376, heads = 56, ffn = 14336;
  int warmup = 3;
  int iters = 20;
  bool gemm = true;
  bool attention = true;
};

// Runs on the current CUDA device; throws h3rt::Error when none is usable.
nlohmann::json run_block_kernels_bench(const BlockKernelsBenchOptions& opt);

}  // namespace h3rt::bench
