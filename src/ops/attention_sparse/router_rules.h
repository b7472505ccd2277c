// The router's arithmetic and rules (router.h), shared by the CPU reference and the CUDA kernel
// so both do the same fp32 operations in the same order: explicit fmaf, no a*b+c left for a
// compiler to contract (the CPU file is also compiled with -ffp-contract=off).
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define H3RT_HD __host__ __device__ __forceinline__
#else
#define H3RT_HD inline
#endif

namespace h3rt::attention_sparse::rules {

// Mean of n values load(0..n-1): sequential fp32 sum, then one division.
template <class Load>
H3RT_HD float pooled_mean(Load load, int64_t n) {
  float s = 0.0f;
#ifdef __CUDA_ARCH__
#pragma unroll 8
#endif
  for (int64_t i = 0; i < n; ++i) s += load(i);
  return s / static_cast<float>(n);
}

// fma chain over d ascending: the pooled score of one key block.
template <class A, class B>
H3RT_HD float dot(A a, B b, int64_t n) {
  float acc = 0.0f;
  for (int64_t d = 0; d < n; ++d) acc = fmaf(a(d), b(d), acc);
  return acc;
}

struct RowStats {
  float mu, sd;
};
H3RT_HD RowStats row_stats(const float* s, int64_t n) {
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += s[j];
  const float mu = sum / static_cast<float>(n);
  float sq = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float d = s[j] - mu;
    sq = fmaf(d, d, sq);
  }
  return {mu, sqrtf(sq / static_cast<float>(n))};
}
H3RT_HD float z_score(float s, RowStats st) {
  return st.sd > 0.0f ? (s - st.mu) / st.sd : 0.0f;
}

// The forced key blocks and the dense tiles of one query tile.
struct TileRule {
  int64_t band_lo, band_hi;  // forced band [lo, hi] of key blocks
  int64_t prefix_hi;         // key blocks [0, prefix_hi) hold a prefix key
  bool dense;                // every block (video_rows_only and a prefix row in the tile)
  H3RT_HD bool forced(int64_t j) const {
    return dense || j < prefix_hi || (j >= band_lo && j <= band_hi);
  }
};
H3RT_HD TileRule tile_rule(int64_t tile, int64_t q_tile, int64_t seq, int64_t prefix_rows,
                           int64_t band, bool video_rows_only, int64_t key_block) {
  const int64_t q0 = tile * q_tile;
  const int64_t q1 = (q0 + q_tile < seq ? q0 + q_tile : seq) - 1;  // last row
  const int64_t nkb = (seq + key_block - 1) / key_block;
  TileRule r;
  r.band_lo = q0 / key_block - band;
  r.band_hi = q1 / key_block + band;
  if (r.band_lo < 0) r.band_lo = 0;
  if (r.band_hi > nkb - 1) r.band_hi = nkb - 1;
  r.prefix_hi = (prefix_rows + key_block - 1) / key_block;
  r.dense = video_rows_only && q0 < prefix_rows;
  return r;
}

// Rank of optional candidate j among the candidates (z descending, then index ascending).
H3RT_HD int64_t rank_of(int64_t j, const float* z, const unsigned char* cand, int64_t n) {
  int64_t r = 0;
  for (int64_t i = 0; i < n; ++i)
    if (cand[i] && (z[i] > z[j] || (z[i] == z[j] && i < j))) ++r;
  return r;
}

}  // namespace h3rt::attention_sparse::rules
