#include "h3rt/compare.h"

#include <cstdio>
#include <fstream>

#include "h3rt/check.h"

namespace h3rt {
namespace {

bool names_a_time(const std::string& path) {  // or an energy (bench telemetry)
  return path.find("seconds") != std::string::npos ||
         path.find("milliseconds") != std::string::npos || path.find("joules") != std::string::npos;
}

void walk(const nlohmann::json& a, const nlohmann::json& b, const std::string& path,
          std::vector<TimingComparison>& out) {
  if (a.is_object() && b.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it)
      if (b.contains(it.key()))
        walk(*it, b.at(it.key()), path.empty() ? it.key() : path + "/" + it.key(), out);
  } else if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
      walk(a[i], b[i], path + "/" + std::to_string(i), out);
  } else if (a.is_number() && b.is_number() && names_a_time(path)) {
    out.push_back({path, a.get<double>(), b.get<double>()});
  }
}

}  // namespace

std::vector<TimingComparison> compare_timings(const nlohmann::json& before,
                                              const nlohmann::json& after) {
  std::vector<TimingComparison> out;
  walk(before, after, "", out);
  return out;
}

std::string format_comparison(const std::vector<TimingComparison>& rows,
                              const std::string& before_name, const std::string& after_name) {
  std::string s;
  char line[512];
  std::snprintf(line, sizeof line, "%-60s %14s %14s %9s\n", "timing", before_name.c_str(),
                after_name.c_str(), "speedup");
  s += line;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%-60s %14.4f %14.4f %8.3fx\n", r.path.c_str(), r.before,
                  r.after, r.speedup());
    s += line;
  }
  return s;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  H3RT_CHECK(f, path, ": cannot open");
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    H3RT_FAIL(path, ": not valid JSON: ", e.what());
  }
}

}  // namespace h3rt
