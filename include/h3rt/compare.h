// Side-by-side comparison of two timing reports (JSON): every numeric value whose path names
// a time ("...seconds..." or "...milliseconds...") or an energy ("...joules..."), present in
// both, with the ratio old/new (for an energy: above 1 means the new run used less).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace h3rt {

struct TimingComparison {
  std::string path;  // e.g. "representative_block_p50_milliseconds/attention"
  double before = 0, after = 0;
  double speedup() const { return after > 0 ? before / after : 0.0; }
};

std::vector<TimingComparison> compare_timings(const nlohmann::json& before,
                                              const nlohmann::json& after);
// A fixed-width table of the comparison.
std::string format_comparison(const std::vector<TimingComparison>& rows,
                              const std::string& before_name, const std::string& after_name);
nlohmann::json read_json(const std::string& path);  // errors name the file

}  // namespace h3rt
