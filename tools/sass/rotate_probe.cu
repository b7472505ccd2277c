// Probe kernels for tools/sass/count.sh: each runs one step of the int8 convrot activation path
// (src/ops/int8_linear/rotate_quantize.cuh) on one warp's 512-column unit (G = 256), so the
// static SASS of each kernel, divided by 16 (a lane's columns), is that step's instructions per
// element. The unit and tile live in shared memory as in the real kernels; each probe adds a
// few instructions of its own (loads of its input, one store).
#include "ops/int8_linear/rotate_quantize.cuh"

using namespace h3rt::ops::int8_detail;

namespace {
__device__ void lane_words(const uint4* in, uint32_t (&w)[8]) {
  const uint4 a = in[threadIdx.x * 2], b = in[threadIdx.x * 2 + 1];
  w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}
}  // namespace

#define PROBE_ROTATE(name, call)                                               \
  extern "C" __global__ void name(const uint4* in, float* out, int e) {        \
    __shared__ __align__(16) unsigned char unit[kUnitPitch];                   \
    __shared__ double tile[32 * 17];                                           \
    uint32_t w[8];                                                             \
    lane_words(in, w);                                                         \
    float mf = 0.0f;                                                           \
    call;                                                                      \
    __syncwarp();                                                              \
    out[threadIdx.x] = mf + unit[threadIdx.x * 7];                             \
  }

PROBE_ROTATE(rotate_double, rotate_unit_double<256>(w, unit, tile, threadIdx.x, mf))
PROBE_ROTATE(rotate_int64, rotate_unit_integer<256>(w, e, unit, tile, threadIdx.x, mf))
PROBE_ROTATE(rotate_int32, rotate_unit_int32<256>(w, e, unit, tile, threadIdx.x, mf))

// The integer form's span check (group_magnitudes).
extern "C" __global__ void span_check(const uint4* in, uint32_t* out) {
  uint32_t w[8], lo, hi;
  lane_words(in, w);
  group_magnitudes<256>(w, lo, hi);
  out[threadIdx.x] = lo ^ (hi << 16);
}

// The quantize pass: 16 staged bf16 values -> 16 int8.
extern "C" __global__ void quantize_pass(const uint4* in, uint4* out, float rcp) {
  const uint4 v[2] = {in[threadIdx.x * 2], in[threadIdx.x * 2 + 1]};
  out[threadIdx.x] = quantize16(v, rcp);
}
