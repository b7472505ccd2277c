// DRAM bytes that fusing NVFP4 quantization into the producers saves per transformer block
// (src/formats/nvfp4_quantize_fused.h), per boundary, under the activation-only byte model of
// src/bench/block_kernels_bench.h (modulation tables and weights live in L2 and are not counted).
//
// For an activation of N = rows * cols bf16 elements:
//   unfused, given g:     producer writes 2N bytes of bf16, nvfp4_quantize (kGiven) reads 2N;
//   unfused, computed g:  producer writes 2N, nvfp4_quantize (kTwoPass) reads 2N twice (4N);
//   fused,   given g:     neither happens: saved 4N;
//   fused,   computed g:  pass 2 re-reads the producer's inputs instead: rmsnorm_modulate re-reads
//                         x (2N; with the fused residual, pass 1 already wrote the updated x, so
//                         pass 2 reads x alone), swiglu re-reads its [rows, 2F] input (4N).
//                         saved = 2N + 4N - re-read.
// The NVFP4 qdata (N/2) and scale bytes are written either way and do not count. The attention
// output is fused with a given g only (the epilogue cannot be recomputed); with a computed g it
// stays unfused and saves nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace h3rt::bench {

struct Nvfp4FusionShape {
  int64_t rows = 37810, hidden = 5376, heads = 56, head_dim = 128, ffn = 14336;
};

struct Nvfp4BoundaryBytes {
  std::string name;                 // producer -> consumer GEMM
  int64_t rows = 0, cols = 0;       // the NVFP4 activation
  int64_t bf16_write = 0;           // 2N: the bf16 intermediate the producer no longer writes
  int64_t quant_read_given = 0;     // 2N: nvfp4_quantize's read with a given g
  int64_t quant_read_two_pass = 0;  // 4N: its two reads with a computed g
  int64_t producer_reread = 0;      // recompute mode: the producer's inputs read a second time
  bool computed_fused = true;       // false: computed g keeps the unfused path
  int64_t saved_given = 0;          // bf16_write + quant_read_given
  int64_t saved_computed = 0;  // bf16_write + quant_read_two_pass - producer_reread (0 unfused)
};

struct Nvfp4FusionBytes {
  std::vector<Nvfp4BoundaryBytes> boundaries;   // the four NVFP4 activations of one block
  int64_t saved_given = 0, saved_computed = 0;  // sums over the boundaries
};

// The four boundaries of one block: norm1+modulate -> qkv, residual+norm2+modulate -> fc1,
// attention -> out_proj, swiglu -> fc2.
Nvfp4FusionBytes nvfp4_fusion_bytes(const Nvfp4FusionShape& shape = {});

}  // namespace h3rt::bench
