// The NVFP4 quantize kernels with the hardware e2m1 conversion (cvt.rn.satfinite.e2m1x2.f32).
// The instruction exists on the arch-specific Blackwell targets (sm_100a/103a/110a/120a/121a);
// for any other compiled arch HardwareCvt falls back to the software conversion, so these
// instantiations are correct wherever they run. nvfp4_quantize() selects them on cc >= 10.0.
#include "formats/nvfp4_quantize_kernels.cuh"

namespace h3rt::nvfp4_detail {

cudaError_t launch_quantize_hw(const Geometry& geo, const float* g, bool fast, cudaStream_t s) {
  return launch_quantize<HardwareCvt>(geo, g, fast, s);
}

cudaError_t launch_fused_hw(const Geometry& geo, Workspace* ws, float* g_out, bool fast,
                            cudaStream_t s) {
  return launch_fused<HardwareCvt>(geo, ws, g_out, fast, s);
}

}  // namespace h3rt::nvfp4_detail
