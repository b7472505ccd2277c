#include "bench/kernel_timeline.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>

namespace h3rt::bench {
namespace {

// `s` without its balanced <...> and (...) groups.
std::string strip_groups(const std::string& s) {
  std::string out;
  int depth = 0;
  for (char ch : s) {
    if (ch == '<' || ch == '(') ++depth;
    if (depth == 0) out += ch;
    if ((ch == '>' || ch == ')') && depth > 0) --depth;
  }
  return out;
}

// The last two of `parts`, joined by "::".
std::string last_two(const std::vector<std::string>& parts) {
  if (parts.empty()) return {};
  return parts.size() == 1 ? parts[0] : parts[parts.size() - 2] + "::" + parts.back();
}

// The scope components of a demangled name without groups ("a::b::::c" -> a, b, c).
std::vector<std::string> scope_parts(const std::string& s) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t next = std::min(s.find("::", pos), s.size());
    if (next > pos) parts.push_back(s.substr(pos, next - pos));
    pos = next + 2;
  }
  return parts;
}

// For names the demangler refuses (some CUTLASS kernels): the <length><identifier> components
// of the nested name up to its first template argument list.
std::vector<std::string> mangled_prefix_parts(const std::string& m) {
  std::vector<std::string> parts;
  size_t pos = m.rfind("_ZN", 0) == 0 ? 3 : 2;
  while (pos < m.size() && std::isdigit(static_cast<unsigned char>(m[pos]))) {
    size_t len = 0;
    while (pos < m.size() && std::isdigit(static_cast<unsigned char>(m[pos])))
      len = len * 10 + static_cast<size_t>(m[pos++] - '0');
    if (len == 0 || pos + len > m.size()) break;
    parts.push_back(m.substr(pos, len));
    pos += len;
  }
  return parts;
}

}  // namespace

std::string short_kernel_name(const std::string& mangled) {
  // Only symbol names: __cxa_demangle also reads "c" or "d" as type names.
  if (mangled.rfind("_Z", 0) != 0) return mangled;
  int status = -1;
  std::unique_ptr<char, decltype(&std::free)> d(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free);
  if (status != 0 || !d) {
    const std::string s = last_two(mangled_prefix_parts(mangled));
    return s.empty() ? mangled : s;
  }
  std::string s = strip_groups(d.get());
  if (const auto sp = s.rfind(' '); sp != std::string::npos) s = s.substr(sp + 1);  // return type
  return last_two(scope_parts(s));
}

KernelTimeline kernel_timeline(std::vector<KernelSpan> spans, size_t keep) {
  KernelTimeline t;
  for (const auto& k : spans) ++(k.kernel ? t.kernels : t.copies);
  if (spans.empty()) return t;
  std::sort(spans.begin(), spans.end(),
            [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
  uint64_t covered = spans[0].end_ns;  // the latest end so far
  const KernelSpan* last = &spans[0];  // the kernel that ends at `covered`
  uint64_t idle = 0;
  std::vector<KernelGap> gaps;
  for (size_t i = 1; i < spans.size(); ++i) {
    const KernelSpan& k = spans[i];
    if (k.start_ns > covered) {
      idle += k.start_ns - covered;
      gaps.push_back({last->name, k.name, (k.start_ns - covered) / 1e3});
    }
    if (k.end_ns > covered) {
      covered = k.end_ns;
      last = &k;
    }
  }
  t.span_us = (covered - spans[0].start_ns) / 1e3;
  t.idle_us = idle / 1e3;
  t.busy_us = t.span_us - t.idle_us;
  std::stable_sort(gaps.begin(), gaps.end(),
                   [](const KernelGap& a, const KernelGap& b) { return a.us > b.us; });
  gaps.resize(std::min(keep, gaps.size()));
  for (auto& g : gaps) {
    g.after = short_kernel_name(g.after);
    g.before = short_kernel_name(g.before);
  }
  t.largest = std::move(gaps);
  return t;
}

nlohmann::json kernel_timeline_json(const KernelTimeline& t, const std::string& source) {
  nlohmann::json gaps = nlohmann::json::array();
  for (const auto& g : t.largest)
    gaps.push_back({{"after", g.after}, {"before", g.before}, {"microseconds", g.us}});
  return {{"source", source},
          {"kernels", t.kernels},
          {"memsets_and_memcpys", t.copies},
          {"span_ms", t.span_us / 1e3},
          {"busy_ms", t.busy_us / 1e3},
          {"idle_ms", t.idle_us / 1e3},
          {"idle_fraction", t.idle_fraction()},
          {"largest_gaps", gaps}};
}

}  // namespace h3rt::bench
