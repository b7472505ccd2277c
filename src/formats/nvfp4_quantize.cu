// NVFP4 quantize launcher: validation, geometry, global-scale source and converter dispatch.
#include "cuda/runtime.h"
#include "formats/nvfp4_quantize.h"
#include "formats/nvfp4_quantize_kernels.cuh"

namespace h3rt {

using nvfp4_detail::Geometry;
using nvfp4_detail::Workspace;
using namespace nvfp4_detail;

size_t nvfp4_quantize_workspace_bytes() {
  return sizeof(Workspace);
}

bool nvfp4_uses_hardware_cvt(const Nvfp4QuantizeParams& p) {
  if (p.force_software_cvt) return false;
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return false;
  return major >= 10 && cuda::compiled_arch_supports(major, minor) >= 100;
}

namespace {

// The amax pass of kTwoPass (defined here, not in the shared .cuh: it has one instantiation).
__global__ void __launch_bounds__(kThreads) amax_kernel(Geometry geo, Workspace* ws, float* g_out) {
  uint32_t m = 0;
  for (uint32_t t = blockIdx.x; t < geo.ntiles; t += gridDim.x) m = max(m, tile_absmax(geo, t));
  m = block_max(m);
  float g;
  if (threadIdx.x == 0 && arrive_amax(geo, ws, m, &g)) *g_out = g;
}

bool valid(const Nvfp4QuantizeParams& p) {
  if (p.rows < 0 || p.cols < 0 || p.cols % nvfp4::kBlock != 0) return false;
  if (p.rows == 0 || p.cols == 0) return true;
  if (!p.x || !p.qdata || !p.scales || !p.global_scale) return false;
  if (p.ld < p.cols || p.ld % 8 != 0) return false;
  if (reinterpret_cast<uintptr_t>(p.x) % 16 != 0 || reinterpret_cast<uintptr_t>(p.qdata) % 4 != 0)
    return false;
  if (p.rows * (p.cols / 8) >= (int64_t{1} << 31) - nvfp4_detail::kTileChunks) return false;
  if (p.source != Nvfp4GlobalScaleSource::kGiven && !p.workspace) return false;
  return true;
}

Geometry make_geometry(const Nvfp4QuantizeParams& p) {
  Geometry g{};
  g.x = static_cast<const __nv_bfloat16*>(p.x);
  g.ld = p.ld;
  g.cpr = static_cast<uint32_t>(p.cols / 8);
  g.nchunks = static_cast<uint32_t>(p.rows) * g.cpr;
  g.ntiles = (g.nchunks + nvfp4_detail::kTileChunks - 1) / nvfp4_detail::kTileChunks;
  g.rows = p.rows;
  g.kb = p.cols / nvfp4::kBlock;
  g.kbp = nvfp4::round_up(g.kb, 4);
  g.qdata = p.qdata;
  g.scales = p.scales;
  g.bf16_rule = p.rule == Nvfp4ScaleRule::kBf16Activation ? 1 : 0;
  g.nblocks = static_cast<uint32_t>(p.rows * g.kb);
  g.kb_div = nvfp4::DivU31(static_cast<uint32_t>(g.kb));
  g.scale_tiles = static_cast<uint32_t>(g.kbp / 4);
  g.qdata8 = reinterpret_cast<uintptr_t>(p.qdata) % 8 == 0;
  return g;
}

cudaError_t launch_amax(const Geometry& geo, Workspace* ws, float* g_out, cudaStream_t s) {
  int dev = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, amax_kernel, nvfp4_detail::kThreads,
                                                      0);
  if (e != cudaSuccess) return e;
  const int64_t resident = static_cast<int64_t>(per_sm > 0 ? per_sm : 1) * sms;
  const unsigned grid = static_cast<unsigned>(resident < geo.ntiles ? resident : geo.ntiles);
  amax_kernel<<<grid, nvfp4_detail::kThreads, 0, s>>>(geo, ws, g_out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t nvfp4_detail::quantize_with_encoder(const Nvfp4QuantizeParams& p, bool legacy,
                                                cudaStream_t s) {
  if (!valid(p)) return cudaErrorInvalidValue;
  const bool computed = p.source != Nvfp4GlobalScaleSource::kGiven;
  if (p.rows == 0 || p.cols == 0)
    return computed ? cudaMemsetAsync(p.global_scale, 0, sizeof(float), s) : cudaSuccess;
  const Geometry geo = make_geometry(p);
  const bool hw = nvfp4_uses_hardware_cvt(p), fast = p.math == Nvfp4Math::kFastMath;
  auto* ws = static_cast<Workspace*>(p.workspace);
  if (p.source == Nvfp4GlobalScaleSource::kSingleLaunch)
    return hw ? nvfp4_detail::launch_fused_hw(geo, ws, p.global_scale, fast, s)
              : nvfp4_detail::launch_fused<nvfp4_detail::SoftwareCvt>(geo, ws, p.global_scale, fast,
                                                                      s);
  if (computed) {
    const cudaError_t e = launch_amax(geo, ws, p.global_scale, s);
    if (e != cudaSuccess) return e;
  }
  return hw ? nvfp4_detail::launch_quantize_hw(geo, p.global_scale, fast, s)
            : nvfp4_detail::launch_quantize<nvfp4_detail::SoftwareCvt>(geo, p.global_scale, fast, s,
                                                                       legacy);
}

cudaError_t nvfp4_quantize(const Nvfp4QuantizeParams& p, cudaStream_t s) {
  return nvfp4_detail::quantize_with_encoder(p, false, s);
}

}  // namespace h3rt
