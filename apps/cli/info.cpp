// `h3rt info F`: what a safetensors file holds: tensors, dtypes, metadata, and for H3
// checkpoints the detected layout/format and inferred config.
#include <cstdio>
#include <map>
#include <string>

#include "cli/commands.h"
#include "h3rt/safetensors.h"

namespace h3rt::cli {
namespace {

void print_tensors(const SafetensorsFile& f) {
  std::map<std::string, int64_t> bytes_by_dtype;
  for (const auto& e : f.entries()) {
    std::printf("  %-64s %-7s %s\n", e.name.c_str(), dtype_name(e.dtype), shape_str(e.shape).c_str());
    bytes_by_dtype[dtype_name(e.dtype)] += e.end - e.begin;
  }
  std::printf("%zu tensors;", f.entries().size());
  for (const auto& [d, b] : bytes_by_dtype) std::printf(" %s %.3f MB;", d.c_str(), b / 1e6);
  std::printf("\n");
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "List a safetensors file's tensors, metadata, detected "
                                         "checkpoint format and inferred H3 config");
  auto path = std::make_shared<std::string>();
  cmd->add_option("file", *path, "a .safetensors file")->required();
  cmd->callback([path] {
    SafetensorsFile f = SafetensorsFile::open(*path);
    std::printf("%s\n", path->c_str());
    for (const auto& [k, v] : f.metadata()) std::printf("  metadata %s = %s\n", k.c_str(), v.c_str());
    print_tensors(f);
  });
}

}  // namespace h3rt::cli
