// NVFP4 output of a fused producer: the optional `Nvfp4Out` block that the producers of NVFP4
// activations (rmsnorm_modulate, swiglu, the flash and Sage attention epilogues) accept in their
// params. With it set, the producer encodes its bf16 output straight to NVFP4 (qdata + tiled
// block scales, include/h3rt/nvfp4.h) and the bf16 intermediate need not be written; the bytes
// are bit-identical to "producer writes bf16, then nvfp4_quantize(kIeee)" with the same source
// and rule, because the producer rounds every output to bf16 exactly as its unfused kernel does
// and encodes those bf16 values with the quantizer's own per-block encoder
// (nvfp4_detail::BlockEncoder in nvfp4_quantize_kernels.cuh).
//
// Global scale g, by `source`:
//   kGiven    g is read from *global_scale (a static input_scale): one pass, the producer writes
//             qdata + scales (and bf16 too if its bf16 output pointer is set).
//   kTwoPass  g = rule(amax|y|) of the bf16 output y, which is needed before any block can be
//             encoded, and y (rows x 5376..14336 bf16 at the seed shape, 0.4-1.1 GB) cannot stay
//             on chip across a grid barrier. So the producer runs twice: pass 1 computes y and
//             reduces only its amax (atomicMax into the workspace; the last CTA computes g, stores
//             *global_scale and resets the workspace, as nvfp4_quantize's kTwoPass); pass 2
//             recomputes y and encodes it with that g. The producer's inputs are read twice, y is
//             never stored. (rmsnorm_modulate with the fused residual writes the updated x in
//             pass 1; pass 2 is then the plain norm of that x, so the residual is added once.)
//             The attention epilogues cannot be recomputed: they accept kGiven only, and the
//             computed-g path stays unfused (bf16 out, then nvfp4_quantize).
//   kSingleLaunch is not accepted (see above).
// Math: IEEE only (Nvfp4Math::kIeee semantics); the e2m1 conversion is the hardware cvt where the
// target has it and the software chain elsewhere, as in nvfp4_quantize.
// Workspace: nvfp4_quantize_workspace_bytes(), zero-filled once, one per stream (kTwoPass only).
// Storage: qdata [rows, cols/2] contiguous (4-byte aligned; 8-byte for attention), scales
// nvfp4_scales_bytes(rows, cols) with the padding written as zero; cols % 16 == 0.
#pragma once

#include <cstdint>

#include "formats/nvfp4_quantize.h"
#include "h3rt/check.h"

namespace h3rt {

struct Nvfp4Out {
  uint8_t* qdata = nullptr;       // [rows, cols/2]; null: no NVFP4 output (plain bf16 producer)
  uint8_t* scales = nullptr;      // nvfp4_scales_bytes(rows, cols), 128x4 tiled
  float* global_scale = nullptr;  // device float[1]: input (kGiven) or output (kTwoPass)
  Nvfp4GlobalScaleSource source = Nvfp4GlobalScaleSource::kGiven;
  Nvfp4ScaleRule rule = Nvfp4ScaleRule::kBf16Activation;  // how a computed g derives from amax
  void* workspace = nullptr;                              // kTwoPass only

  bool enabled() const { return qdata != nullptr; }
  bool computed() const { return source != Nvfp4GlobalScaleSource::kGiven; }
};

// Validates an enabled Nvfp4Out for an output of `cols` columns (throws h3rt::Error naming `op`).
inline void check_nvfp4_out(const Nvfp4Out& o, const char* op, int64_t cols, int qdata_align) {
  H3RT_CHECK(o.qdata && o.scales && o.global_scale, op, ": nvfp4 output needs qdata, scales and ",
             "global_scale");
  H3RT_CHECK(cols % 16 == 0, op, ": nvfp4 output needs cols % 16 == 0, got ", cols);
  H3RT_CHECK(reinterpret_cast<uintptr_t>(o.qdata) % qdata_align == 0, op, ": nvfp4 qdata must be ",
             qdata_align, "-byte aligned");
  H3RT_CHECK(o.source != Nvfp4GlobalScaleSource::kSingleLaunch, op,
             ": fused nvfp4 output takes kGiven or kTwoPass (recompute), not kSingleLaunch");
  H3RT_CHECK(!o.computed() || o.workspace, op, ": computed global scale needs the workspace");
}

}  // namespace h3rt
