// `h3rt quantize-nvfp4`: pack a bf16 tensor as NVFP4 (comfy-kitchen layout) on the host.
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "h3rt/nvfp4.h"

namespace h3rt::cli {

void add_quantize_nvfp4_command(CLI::App& app) {
  struct Opts {
    std::string in, out, rule = "f32";
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "quantize-nvfp4",
      "Quantize tensor `x` (bf16 [rows, cols]) of a safetensors file to NVFP4: writes `qdata` "
      "(u8 [rows, cols/2]), `scales` (e4m3 bytes, 128x4 tiled) and `per_tensor_scale` (f32 [1])");
  cmd->add_option("--in", o->in, "input .safetensors with `x` and optional `per_tensor_scale`")
      ->required();
  cmd->add_option("--out", o->out, "output .safetensors")->required();
  cmd->add_option("--scale-rule", o->rule,
                  "global scale when the input has no `per_tensor_scale`: f32 = float(amax)/2688 "
                  "(weight packing), bf16 = bf16(amax * (1/2688)) (activations)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  cmd->callback([o] {
    check_output_path(o->out, "--out");
    quantize_nvfp4_file(
        o->in, o->out,
        o->rule == "bf16" ? Nvfp4ScaleRule::kBf16Activation : Nvfp4ScaleRule::kF32Divide);
  });
}

}  // namespace h3rt::cli
