#include <algorithm>

#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "h3rt/memory.h"
#include "model/adaln_int8_cuda.h"
#include "ops/int8_linear/int8_linear.h"

namespace h3rt::model {

int64_t adaln_int8_scratch_bytes(int64_t rows, int64_t in, int64_t out) {
  return rows * in + rows * 4 +
         std::max<int64_t>(1, static_cast<int64_t>(ops::int8_linear_workspace_bytes(rows, out)));
}

AdalnInt8Scratch make_adaln_int8_scratch(int64_t rows, int64_t in, int64_t out) {
  const MemoryScope scope("the int8 AdaLN layers' activation scratch");
  AdalnInt8Scratch s;
  s.rows = rows;
  s.in = in;
  s.out = out;
  s.q = cuda::device_empty(DType::i8, {rows, in});
  s.scale = cuda::device_empty(DType::f32, {rows});
  const size_t ws = std::max<size_t>(1, ops::int8_linear_workspace_bytes(rows, out));
  s.workspace = cuda::device_empty(DType::u8, {static_cast<int64_t>(ws)});
  return s;
}

void adaln_int8_linear(const DeviceLinear& l, const __nv_bfloat16* x, __nv_bfloat16* y,
                       int64_t rows, const AdalnInt8Scratch& s, cudaStream_t stream) {
  H3RT_CHECK(l.int8() && l.in == s.in && l.out <= s.out && rows <= s.rows, "int8 AdaLN layer [",
             l.out, ", ", l.in, "] at ", rows, " rows does not fit its scratch (", s.rows,
             " rows of ", s.in, " -> ", s.out, ")");
  if (rows == 0) return;
  int8_project_cuda(l, x, y, rows,
                    {s.q.ptr<int8_t>(), s.scale.ptr<float>(), s.workspace.data(),
                     static_cast<size_t>(s.workspace.nbytes())},
                    stream);
}

}  // namespace h3rt::model
