// Pictures of benchmark reports as plain SVG (no dependency), drawn from the report JSON so that
// any saved report can be drawn again:
//  - a block breakdown (`bench block`'s report, or the peer's bench/torch_block.py JSON): one
//    horizontal bar per component and series, our component names with the seeds' names beside
//    them where they differ, the block total, and the clock and power per component when the
//    report has telemetry. A block report with a "peer" object (bench block --peer) draws the
//    peer's bars beside ours.
//  - a step timeline (`bench step`: the eager step's stages along time, and the CUDA graph step;
//    `bench sample`: each step's stages along the run).
// Two reports (bench compare --plot) draw as one picture of the same kind.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace h3rt::bench {

// The seeds' name(s) for one of our block components (the seeds time norm and modulate apart);
// the name itself where they agree.
std::string seed_component_name(const std::string& component);

// A block report or a peer JSON with this series' name; or a step / sample report. Throws
// h3rt::Error naming `what` when the JSON is none of these.
std::string plot_report_svg(const nlohmann::json& report, const std::string& what = "report");
// Two reports of one kind side by side (bars or timeline rows), named a_name and b_name.
std::string plot_comparison_svg(const nlohmann::json& a, const std::string& a_name,
                                const nlohmann::json& b, const std::string& b_name);

// Writes the picture atomically (src/io/atomic_file.h).
void write_svg(const std::string& path, const std::string& svg);

// The result of bench/torch_block.py's JSON for `gemm` (bf16, fp8, int8_convrot; else its first
// result) as the "peer" object of a block report: source, gemm, block_ms, components_ms.
nlohmann::json peer_for_block_report(const nlohmann::json& peer_file, const std::string& source,
                                     const std::string& gemm);

}  // namespace h3rt::bench
