// The `quantize-nvfp4` file transform (the CLI verb is a thin wrapper around it).
#include <cmath>

#include "formats/nvfp4_layout.h"
#include "h3rt/nvfp4.h"
#include "h3rt/safetensors.h"

namespace h3rt {

void quantize_nvfp4_file(const std::string& in_path, const std::string& out_path,
                         Nvfp4ScaleRule rule) {
  SafetensorsFile in = SafetensorsFile::open(in_path);
  H3RT_CHECK(in.contains("x"), in_path,
             ": no tensor `x` (expected bf16 [rows, cols], cols a "
             "multiple of 16)");
  const Tensor x = in.get("x");
  H3RT_CHECK(x.dtype() == DType::bf16 && x.dim() == 2, in_path,
             ": tensor `x` must be bf16 "
             "[rows, cols], got ",
             dtype_name(x.dtype()), " ", shape_str(x.shape()));
  const int64_t rows = x.size(0), cols = x.size(1);
  H3RT_CHECK(cols % nvfp4::kBlock == 0, in_path, ": tensor `x` ", shape_str(x.shape()),
             ": cols must be a multiple of 16 (expected [", rows, ", ",
             nvfp4::round_up(cols, nvfp4::kBlock), "])");
  float g;
  if (in.contains("per_tensor_scale")) {
    g = in.get("per_tensor_scale", DType::f32, {1}).ptr<float>()[0];
    H3RT_CHECK(std::isfinite(g) && g >= 0.0f, in_path,
               ": `per_tensor_scale` must be finite and "
               ">= 0, got ",
               g);
  } else {
    g = nvfp4_global_scale(x, rule);
    H3RT_CHECK(std::isfinite(g), in_path, ": tensor `x` holds non-finite values");
  }
  Nvfp4Tensor q = nvfp4_quantize(x, g);
  Tensor scale = Tensor::zeros(DType::f32, {1});
  scale.ptr<float>()[0] = g;
  write_safetensors(out_path,
                    {{"qdata", q.qdata}, {"scales", q.scales}, {"per_tensor_scale", scale}},
                    {{"format", "nvfp4"}, {"layout", "qdata hi_first; scales 128x4 tiled"}});
}

}  // namespace h3rt
