// A SparseAttention configuration in one call, for the CPU and GPU tests of sparse attention.
#pragma once

#include <cstdint>

#include "h3rt/sparse.h"

namespace h3rt::test {

inline SparseAttention sparse_config(float tau, int band, int64_t max_blocks = 0,
                                     bool video_rows_only = true) {
  SparseAttention c;
  c.tau = tau;
  c.band = band;
  c.max_blocks = max_blocks;
  c.video_rows_only = video_rows_only;
  return c;
}

}  // namespace h3rt::test
