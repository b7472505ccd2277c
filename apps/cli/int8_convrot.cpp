// `h3rt int8-convrot`: the int8_convrot host reference applied to a file's tensors.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "cli/validators.h"
#include "h3rt/int8.h"
#include "h3rt/safetensors.h"

namespace h3rt::cli {

void add_int8_convrot_command(CLI::App& app) {
  struct Opts {
    std::string in, out;
    int64_t group = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "int8-convrot",
      "Apply ComfyUI's int8_convrot W8A8 linear (Hadamard rotation per group, per-row int8) to "
      "`w` (bf16 [N,K]) and optional `x` (bf16 [M,K]) and `bias` (bf16 [N]) of a safetensors "
      "file: writes `wq` (i8), `ws` (f32 [N,1]) and, with x, `xq`, `xs` and `y` (bf16 [M,N])");
  cmd->add_option("--in", o->in, "input .safetensors")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", o->out, "output .safetensors")->required();
  cmd->add_option("--group-size", o->group,
                  "rotation group size, a power of 4 dividing K (default: the input's "
                  "__metadata__ group_size, else 256)")
      ->check(positive_number());
  cmd->callback([o] {
    check_output_path(o->out, "--out");
    int8_convrot_file(o->in, o->out, o->group);
    const SafetensorsFile f = SafetensorsFile::open(o->out);
    std::string what;
    for (const auto& e : f.entries()) what += (what.empty() ? "" : ", ") + e.name;
    const auto g = f.metadata().find("group_size");
    std::fprintf(stderr, "h3rt int8-convrot: wrote %s (%s; group size %s)\n", o->out.c_str(),
                 what.c_str(), g == f.metadata().end() ? "?" : g->second.c_str());
  });
}

}  // namespace h3rt::cli
