// `h3rt make-lora`: a synthetic LoRA of a preset's shapes (h3rt::make_synthetic_lora) written in
// ComfyUI's key form, a stand-in for the turbo LoRA in end-to-end runs (`sample --lora F`).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "cli/validators.h"
#include "h3rt/lora.h"

namespace h3rt::cli {

void add_make_lora_command(CLI::App& app) {
  struct Opts {
    std::string preset = "tiny", out;
    int64_t rank = 64;
    int pairs = 259;
    uint64_t seed = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "make-lora",
      "Write a synthetic LoRA (hashed bf16 values, alpha = rank) for a preset's layers in "
      "ComfyUI's key form (diffusion_model.<layer>.lora_A/lora_B.weight, .alpha), in the shape "
      "of the release's turbo LoRA: every block's qkv, out, fc1, fc2 and AdaLN, the refiner's "
      "projections, condition_proj, the final AdaLN (259 pairs for h3)");
  cmd->add_option("--preset", o->preset, "tiny or h3 (the layers' shapes)")
      ->check(CLI::IsMember({"tiny", "h3"}))
      ->capture_default_str();
  cmd->add_option("--rank", o->rank, "LoRA rank, in [1, 4096]")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  cmd->add_option("--pairs", o->pairs,
                  "At most this many pairs, the first in the order above (all of tiny's: 16)")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the hashed values")
      ->check(seed_number())
      ->capture_default_str();
  cmd->add_option("--out", o->out, "output .safetensors")->required();
  cmd->callback([o] {
    check_output_path(o->out, "--out");
    const Lora lora = make_synthetic_lora(*config_preset(o->preset), o->rank, o->pairs, o->seed);
    write_lora(o->out, lora);
    std::fprintf(stderr, "h3rt make-lora: %zu pairs of rank %lld for preset %s: wrote %s\n",
                 lora.pairs.size(), static_cast<long long>(o->rank), o->preset.c_str(),
                 o->out.c_str());
  });
}

}  // namespace h3rt::cli
