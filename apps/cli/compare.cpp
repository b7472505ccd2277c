// `h3rt compare A.safetensors B.safetensors`: B's latents against A's (h3rt/quality.h), as a
// table on stdout and optionally JSON.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "h3rt/quality.h"
#include "h3rt/report.h"

namespace h3rt::cli {
namespace {

struct CompareOptions {
  std::vector<std::string> files;
  std::string json;
};

}  // namespace

void add_compare_command(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  auto* cmd = app.add_subcommand(
      "compare",
      "Compare two latent files as `h3rt sample` writes them (first = reference, second = "
      "test): relative L2, cosine, PSNR and SSIM per latent frame and overall for the video, "
      "Pearson correlation and relative L2 for the audio (definitions: h3rt/quality.h)");
  cmd->add_option("latents", o->files, "two .safetensors files (video_latents, audio_latents)")
      ->required()
      ->expected(2)
      ->check(CLI::ExistingFile);
  cmd->add_option("--json", o->json,
                  "Also write the figures as JSON (an infinite PSNR, identical latents, is "
                  "null); - for stdout instead of the table");
  cmd->callback([o] {
    if (!o->json.empty() && o->json != "-") check_output_path(o->json, "--json");
    const LatentComparison c = compare_latent_files(o->files[0], o->files[1]);
    if (o->json != "-") std::fputs(format_latent_comparison(c).c_str(), stdout);
    if (!o->json.empty()) write_json(o->json, to_json(c));
  });
}

}  // namespace h3rt::cli
