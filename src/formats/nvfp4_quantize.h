// NVFP4 quantization on the GPU: bf16 [rows, cols] -> qdata (u8 [rows, cols/2], element 2j in
// the high nibble) + e4m3 block scales in the 128x4 tiled layout, bit-identical to the host
// reference (include/h3rt/nvfp4.h, nvfp4_quantize_into) in the default IEEE mode.
//
// Global scale g, by `source`:
//   kGiven        g is read from *global_scale (device memory): weights' weight_scale_2 or a
//                 static input_scale.
//   kTwoPass      kernel 1 reduces amax|x| (atomicMax on the fp32 bits, which orders like the
//                 values for non-negative floats); its last CTA to finish computes g by `rule`,
//                 stores it to *global_scale and resets the workspace. Kernel 2 quantizes reading
//                 g from *global_scale. x is read twice; kernel 2 walks the tiles in reverse so the
//                 tail that kernel 1 left in L2 is consumed first.
//   kSingleLaunch one cooperative launch of a persistent grid sized from occupancy
//                 (cudaOccupancyMaxActiveBlocksPerMultiprocessor x SMs, capped by the tile count),
//                 so every CTA is resident and the grid barrier cannot deadlock (the cooperative
//                 launch fails instead of hanging if the grid would not fit). Phase 1: each CTA
//                 reduces its tiles and atomicMax-es its amax; it then arrives on a counter. The
//                 last CTA to arrive computes g, publishes it, resets amax and counter, and bumps
//                 a generation word; the others spin (with __nanosleep) until the generation moves
//                 past the value they read before arriving. Phase 2 quantizes the tiles in
//                 reverse order. The workspace is thus left clean for the next launch.
// The workspace (nvfp4_quantize_workspace_bytes()) must be zero-filled once when allocated and
// must not be shared by launches that may run concurrently (one per stream).
//
// Math: kIeee reproduces the reference exactly: s = e4m3_satfinite(min(amax/6/g, 448)) with IEEE
// divisions, codes = e2m1 of the correctly rounded x / (g*s), g*s == 0 -> +0 codes. On the
// software-e2m1 targets (sm_90) no division is executed: the code of an element is the number of
// rounding thresholds it passes, compared as bf16 integers against per-block thresholds
// RD(m_k * g*s) (src/formats/nvfp4_exact_encode.h says why that is exact), and the scale uses
// correctly rounded reciprocals with a Markstein correction (for g in [2^-90, 2^100]; other g
// take the per-element division path). kFastMath mirrors comfy-kitchen's CUDA kernel as built with fast math:
// div.approx.ftz for amax/6 and /g, encode = min(rcp.approx.ftz(s*g), FLT_MAX), codes =
// e2m1_satfinite(x * encode) with ftz (so blocks with s == 0 give +-6 for nonzero x there, and
// a few scales in 1e9 differ from the IEEE ones). Use it only for bit-identity with packs made
// by that kernel.
//
// e2m1 conversion: a software compare chain on sm_90; on targets with the instruction
// (sm_100a/103a/110a/120a/121a) the hardware cvt.rn.satfinite.e2m1x2.f32 with operand a = element
// 2j (PTX puts a in the upper nibble; cuda_fp4.h's float2 helper does the reverse).
// Constraints: cols % 16 == 0, ld % 8 == 0, x 16-byte aligned, qdata 4-byte aligned,
// rows * cols / 8 < 2^31. Inputs are finite (NaN/Inf inputs are not given a defined encoding).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "h3rt/nvfp4.h"

namespace h3rt {

enum class Nvfp4GlobalScaleSource : uint8_t { kGiven, kTwoPass, kSingleLaunch };
enum class Nvfp4Math : uint8_t { kIeee, kFastMath };

struct Nvfp4QuantizeParams {
  const void* x = nullptr;  // bf16 [rows, cols], row stride ld (elements)
  int64_t rows = 0, cols = 0, ld = 0;
  uint8_t* qdata = nullptr;       // [rows, cols / 2], contiguous
  uint8_t* scales = nullptr;      // nvfp4_scales_bytes(rows, cols); padding written as zero
  float* global_scale = nullptr;  // device float[1]: input (kGiven) or output
  Nvfp4GlobalScaleSource source = Nvfp4GlobalScaleSource::kGiven;
  Nvfp4ScaleRule rule = Nvfp4ScaleRule::kBf16Activation;  // how computed g derives from amax
  Nvfp4Math math = Nvfp4Math::kIeee;
  bool force_software_cvt = false;  // keep the software e2m1 path where hardware cvt exists
  void* workspace = nullptr;        // kTwoPass / kSingleLaunch only
};

size_t nvfp4_quantize_workspace_bytes();

cudaError_t nvfp4_quantize(const Nvfp4QuantizeParams& p, cudaStream_t stream);

// Whether nvfp4_quantize would use the hardware e2m1 conversion on the current device.
bool nvfp4_uses_hardware_cvt(const Nvfp4QuantizeParams& p);

}  // namespace h3rt
