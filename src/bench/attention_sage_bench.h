// Benchmark of the Sage attention op at the seed shape: pre-pass and each kernel variant (mma.sync
// w4, wgmma_pp3) timed separately with CUDA events (warm-up, then the median of timed runs), next
// to the dense bf16 flash kernel on the same input; FLOPs = 4*S^2*128*heads.
// Each Sage output is compared with the bf16 flash output (rel. L2) as a sanity check.
// With sustain_seconds > 0: each Sage kernel's whole call also back to back for that long, with
// SM clock, power and joules per call (the attention alone at the power limit, or not).
// With sparse_tau > 0: the block-sparse form side by side with dense Sage (the automatic kernel):
// the router, the sparse kernel, the computed fraction of key blocks and the sparse output's
// rel. L2 against the dense Sage output. On these N(0,1) inputs attention is not local, so that
// error says nothing about quality on a trained model's attention.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace h3rt::bench {

struct AttentionBenchOptions {
  int64_t seq = 37810;
  int64_t heads = 56;
  int warmup = 3;
  int iters = 10;
  // > 0: each Sage kernel's whole call (pre-pass + kernel) also back to back for about this many
  // seconds, with clock, power and the energy counter around the run ("sustained" in the JSON)
  double sustain_seconds = 0;
  std::string json_path;             // optional: write the results as JSON here
  std::vector<std::string> kernels;  // Sage variants to time (names); empty: all
  std::vector<std::string> prepass = {"two_launch", "fused_l2"};  // pre-pass algorithms to time
  float sparse_tau = 0.0f;  // > 0: also time the router + sparse kernel at this tau
  // Rows [0, n) are the prefix (forced keys, dense rows): by default the seed shape's 100 text
  // + 414 audio rows; capped at seq.
  int64_t sparse_prefix_rows = 514;
  int sparse_band = 1;            // SparseAttention::band
  int64_t sparse_max_blocks = 0;  // SparseAttention::max_blocks
};

// Runs the Sage attention (pre-pass + the automatic kernel) on every tensor of `inputs`: each
// must be bf16 [S, 3*H*128] QKV rows (q | k | v). Writes bf16 [S, H*128] under the same names
// to `outputs`. For comparisons against other implementations on the same inputs.
void run_attention_on_file(const std::string& inputs, const std::string& outputs);

// Prints a table and returns 0; throws h3rt::Error on CUDA failures or without a CUDA build.
int run_attention_bench(const AttentionBenchOptions& opt);

}  // namespace h3rt::bench
