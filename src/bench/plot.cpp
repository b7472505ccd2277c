#include "bench/plot.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <vector>

#include "bench/block_report.h"
#include "h3rt/check.h"
#include "io/atomic_file.h"

namespace h3rt::bench {
namespace {

using nlohmann::json;

// ---- what a picture shows, read from report JSON ----

struct Series {  // one set of bars: p50 ms per component, the block total, notes per bar
  std::string name;
  std::map<std::string, double> ms;
  std::map<std::string, std::string> note;
};

struct Segment {
  std::string stage;
  double ms = 0;
};
struct TimelineRow {
  std::string label;
  std::vector<Segment> segments;
};

constexpr const char* kBlockRow = "block";

bool is_block(const json& r) {
  return r.is_object() && r.contains("representative_block_p50_milliseconds");
}
bool is_peer_file(const json& r) {
  return r.is_object() && r.contains("results") && r.at("results").is_object();
}
bool is_timeline(const json& r) {
  return r.is_object() &&
         (r.contains("eager_stage_ms_p50") || r.contains("sampling_stage_seconds_per_step"));
}

double number(const json& j, const std::string& key, double fallback = 0) {
  return j.is_object() && j.contains(key) && j.at(key).is_number() ? j.at(key).get<double>()
                                                                   : fallback;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string ms_text(double v) {
  return fmt(v >= 100 ? "%.1f ms" : v >= 1 ? "%.2f ms" : "%.3f ms", v);
}

// "1725 MHz, 650 W" (and joules) from a telemetry power object with samples.
std::string power_note(const json& p, const char* joules_key) {
  if (!p.is_object() || number(p, "samples") <= 0) return "";
  std::string s = fmt("%.0f MHz, ", number(p, "sm_clock_mhz_median")) +
                  fmt("%.0f W", number(p, "power_w_mean"));
  if (joules_key && p.contains(joules_key) && p.at(joules_key).is_number())
    s += fmt(", %.1f J", p.at(joules_key).get<double>());
  return s;
}

Series ours_series(const json& r, const std::string& name) {
  Series s{name, {}, {}};
  for (const auto& [k, v] : r.at("representative_block_p50_milliseconds").items())
    if (k != "module_forward" && v.is_number()) s.ms[k] = v.get<double>();
  s.ms[kBlockRow] = number(r, "block_p50_milliseconds_uninstrumented");
  const json t = r.value("telemetry", json::object());
  if (t.value("available", false)) {
    const json comps = t.value("components", json::object());  // items() needs an lvalue
    for (const auto& [k, p] : comps.items()) s.note[k] = power_note(p, nullptr);
    s.note[kBlockRow] = power_note(t.value("block", json::object()), "joules_per_block");
  }
  return s;
}

// A peer object (bench block --peer) or one result of a torch_block.py file.
Series peer_series(const json& p, const std::string& name) {
  Series s{name, {}, {}};
  const json comps = p.value("components_ms", json::object());  // items() needs an lvalue
  for (const auto& [k, v] : comps.items())
    if (v.is_number()) s.ms[k] = v.get<double>();
  s.ms[kBlockRow] = number(p, "block_ms");
  return s;
}

const json& first_peer_result(const json& file, const std::string& gemm) {
  const json& results = file.at("results");
  if (results.contains(gemm) && results.at(gemm).contains("components_ms")) return results.at(gemm);
  for (const auto& [k, v] : results.items())
    if (v.is_object() && v.contains("components_ms")) return v;
  H3RT_FAIL("peer report: no result with components_ms (bench/torch_block.py --json output)");
}

// The series a report holds: ours and the peer for a block report, the peer's for its file.
std::vector<Series> block_series(const json& r, const std::string& name, bool with_peer) {
  if (is_peer_file(r)) return {peer_series(first_peer_result(r, ""), name)};
  std::vector<Series> v = {ours_series(r, name)};
  if (with_peer && r.contains("peer"))
    v.push_back(peer_series(r.at("peer"), "peer: " + r.at("peer").value("what", "peer")));
  return v;
}

// The host prepares, then the device runs (the host waits for it in host_finish, which overlaps
// the device stages), then the velocities are copied out: the rest of the step's wall time.
constexpr const char* kHostRest = "launch + copy out (host)";

std::vector<TimelineRow> step_rows(const json& r, const std::string& prefix) {
  std::vector<TimelineRow> rows;
  const json& st = r.at("eager_stage_ms_p50");
  TimelineRow eager{prefix + "eager step", {{"host_prepare", number(st, "host_prepare")}}};
  double t = eager.segments[0].ms;
  for (const char* s : {"inputs", "adaln_tables", "blocks", "final_heads"})
    if (st.contains(s)) {
      eager.segments.push_back({s, st.at(s).get<double>()});
      t += eager.segments.back().ms;
    }
  eager.segments.push_back({kHostRest, std::max(0.0, number(r, "step_ms_p50_eager") - t)});
  rows.push_back(eager);
  const json g = r.value("cuda_graph", json::object());
  const double step = number(g, "step_ms_p50");
  if (g.value("captured", false) && step > 0) {
    const double prep = number(g, "host_prepare_ms_p50"), dev = number(g, "device_ms_p50");
    rows.push_back({prefix + "CUDA graph step",
                    {{"host_prepare", prep},
                     {"graph (device)", dev},
                     {kHostRest, std::max(0.0, step - prep - dev)}}});
  }
  return rows;
}

std::vector<TimelineRow> sample_rows(const json& r, const std::string& prefix) {
  TimelineRow row{prefix + "sampling run", {}};
  for (const json& step : r.at("sampling_stage_seconds_per_step"))
    for (const char* s : {"packing", "denoiser", "output_transform", "sampler_update"})
      if (step.contains(s)) row.segments.push_back({s, step.at(s).get<double>() * 1e3});
  return {row};
}

std::vector<TimelineRow> timeline_rows(const json& r, const std::string& prefix) {
  return r.contains("eager_stage_ms_p50") ? step_rows(r, prefix) : sample_rows(r, prefix);
}

std::string block_title(const json& r) {
  if (!is_block(r)) return "block breakdown";
  const json w = r.value("workload", json::object());
  return "h3rt bench block: " + r.value("device", std::string("?")) + ", " +
         std::to_string(w.value("packed_tokens", 0)) + " rows, " +
         w.value("attention", std::string("?"));
}

std::string timeline_title(const json& r) {
  const std::string dev = r.value("device", std::string("?"));
  if (r.contains("eager_stage_ms_p50"))
    return "h3rt bench step: " + dev + ", " +
           std::to_string(r.value("workload", json::object()).value("packed_tokens", 0)) +
           " rows (adaln_tables interleaves with blocks: sums shown)";
  return "h3rt bench sample: " + dev + ", " + std::to_string(r.value("steps", 0)) + " steps";
}

// ---- SVG ----

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

const char* color(size_t i) {
  static const char* palette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                  "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return palette[i % (sizeof palette / sizeof *palette)];
}

class Svg {
 public:
  void rect(double x, double y, double w, double h, const char* fill, const std::string& attrs) {
    body_ += "<rect " + attrs + " x=\"" + fmt("%.2f", x) + "\" y=\"" + fmt("%.2f", y) +
             "\" width=\"" + fmt("%.2f", std::max(w, 0.5)) + "\" height=\"" + fmt("%.2f", h) +
             "\" fill=\"" + fill + "\"/>\n";
  }
  void text(double x, double y, const std::string& s, int size = 12, const char* anchor = "start",
            const char* cls = "label") {
    body_ += "<text class=\"" + std::string(cls) + "\" x=\"" + fmt("%.2f", x) + "\" y=\"" +
             fmt("%.2f", y) + "\" font-size=\"" + std::to_string(size) + "\" text-anchor=\"" +
             anchor + "\">" + escape(s) + "</text>\n";
  }
  std::string str(double width, double height) const {
    return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
           "width=\"" +
           fmt("%.0f", width) + "\" height=\"" + fmt("%.0f", height) +
           "\" font-family=\"sans-serif\">\n<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" "
           "fill=\"white\"/>\n" +
           body_ + "</svg>\n";
  }

 private:
  std::string body_;
};

void legend(Svg& svg, double y, const std::vector<std::string>& names) {
  double x = 20;
  for (size_t i = 0; i < names.size(); ++i) {
    svg.rect(x, y - 10, 12, 12, color(i), "class=\"legend\"");
    svg.text(x + 16, y, names[i], 12, "start", "legend-label");
    x += 28 + 7.0 * names[i].size();
  }
}

// Room for the longest label at 12 px sans-serif (about 7 px a character).
double label_width(const std::vector<std::string>& labels) {
  size_t n = 0;
  for (const std::string& l : labels) n = std::max(n, l.size());
  return 24 + 7.0 * n;
}

// Components in the block's order, then any others the series have, then the block total.
std::vector<std::string> bar_rows(const std::vector<Series>& series) {
  std::vector<std::string> rows = block_components();
  for (const Series& s : series)
    for (const auto& [k, v] : s.ms)
      if (k != kBlockRow && std::find(rows.begin(), rows.end(), k) == rows.end()) rows.push_back(k);
  std::vector<std::string> present;
  for (const std::string& r : rows)
    for (const Series& s : series)
      if (s.ms.count(r)) {
        present.push_back(r);
        break;
      }
  present.push_back(kBlockRow);
  return present;
}

std::string bar_chart(const std::string& title, const std::vector<Series>& series) {
  const std::vector<std::string> rows = bar_rows(series);
  std::vector<std::string> labels;
  for (const std::string& r : rows) {
    const std::string seed = r == kBlockRow ? "" : seed_component_name(r);
    std::string label = r == kBlockRow ? "block (uninstrumented p50)" : r;
    if (!seed.empty() && seed != r) label += "  [seeds: " + seed + "]";
    labels.push_back(label);
  }
  const double label_w = label_width(labels), bar_w = 520, bar_h = 14, top = 64;
  const double row_h = bar_h * series.size() + 12;
  double max_ms = 0;
  for (const Series& s : series)
    for (const auto& [k, v] : s.ms) max_ms = std::max(max_ms, v);
  if (max_ms <= 0) max_ms = 1;
  Svg svg;
  svg.text(20, 22, title, 14, "start", "title");
  std::vector<std::string> names;
  for (const Series& s : series) names.push_back(s.name);
  legend(svg, 46, names);
  double y = top;
  for (size_t k = 0; k < rows.size(); ++k) {
    const std::string& r = rows[k];
    svg.text(label_w - 8, y + row_h / 2, labels[k], 12, "end");
    for (size_t i = 0; i < series.size(); ++i) {
      const auto it = series[i].ms.find(r);
      if (it == series[i].ms.end()) continue;
      const double by = y + 4 + i * bar_h, w = bar_w * it->second / max_ms;
      svg.rect(label_w, by, w, bar_h - 2, color(i),
               "class=\"bar\" data-series=\"" + escape(series[i].name) + "\" data-component=\"" +
                   escape(r) + "\"");
      std::string value = ms_text(it->second);
      const auto note = series[i].note.find(r);
      if (note != series[i].note.end() && !note->second.empty()) value += " (" + note->second + ")";
      svg.text(label_w + w + 4, by + bar_h - 4, value, 11, "start", "value");
    }
    y += row_h;
  }
  svg.text(20, y + 16,
           "p50 per component; the seeds' qkv_and_output_layout has no counterpart (attention "
           "reads q/k/v through strides)",
           11, "start", "note");
  return svg.str(label_w + bar_w + 260, y + 30);
}

std::string timeline(const std::string& title, const std::vector<TimelineRow>& rows) {
  std::vector<std::string> labels;
  for (const TimelineRow& r : rows) labels.push_back(r.label);
  const double label_w = label_width(labels), width = 860, row_h = 34, top = 70;
  double max_ms = 0;
  std::vector<std::string> stages;
  for (const TimelineRow& r : rows) {
    double t = 0;
    for (const Segment& s : r.segments) {
      t += s.ms;
      if (std::find(stages.begin(), stages.end(), s.stage) == stages.end())
        stages.push_back(s.stage);
    }
    max_ms = std::max(max_ms, t);
  }
  if (max_ms <= 0) max_ms = 1;
  Svg svg;
  svg.text(20, 22, title, 14, "start", "title");
  legend(svg, 46, stages);
  double y = top;
  for (const TimelineRow& r : rows) {
    svg.text(label_w - 8, y + row_h / 2 + 4, r.label, 12, "end");
    double t = 0;
    for (const Segment& s : r.segments) {
      const size_t c = std::find(stages.begin(), stages.end(), s.stage) - stages.begin();
      const double x = label_w + width * t / max_ms, w = width * s.ms / max_ms;
      svg.rect(x, y, w, row_h - 8, color(c),
               "class=\"segment\" data-stage=\"" + escape(s.stage) + "\" data-ms=\"" +
                   fmt("%.4f", s.ms) + "\" stroke=\"white\" stroke-width=\"0.5\"");
      if (w > 90) svg.text(x + 4, y + row_h / 2 + 2, s.stage + " " + ms_text(s.ms), 11);
      t += s.ms;
    }
    svg.text(label_w + width * t / max_ms + 6, y + row_h / 2 + 2, ms_text(t), 11, "start", "value");
    y += row_h;
  }
  for (int i = 0; i <= 4; ++i) {  // time axis
    const double x = label_w + width * i / 4;
    svg.rect(x, y, 1, 6, "#444", "class=\"tick\"");
    svg.text(x, y + 18, ms_text(max_ms * i / 4), 10, "middle", "tick-label");
  }
  return svg.str(label_w + width + 120, y + 34);
}

}  // namespace

std::string seed_component_name(const std::string& component) {
  static const std::map<std::string, std::string> names = {
      {"norm_modulate", "norm + modulate"},
      {"residual_gate_norm_modulate", "residual_gates + norm + modulate"},
  };
  const auto it = names.find(component);
  return it == names.end() ? component : it->second;
}

std::string plot_report_svg(const json& r, const std::string& what) {
  if (is_block(r) || is_peer_file(r))
    return bar_chart(block_title(r), block_series(r, is_block(r) ? "h3rt" : "peer", true));
  if (is_timeline(r)) return timeline(timeline_title(r), timeline_rows(r, ""));
  H3RT_FAIL(what,
            ": not a bench block, step or sample report, nor a peer block JSON "
            "(nothing to plot)");
}

std::string plot_comparison_svg(const json& a, const std::string& a_name, const json& b,
                                const std::string& b_name) {
  const bool bars_a = is_block(a) || is_peer_file(a), bars_b = is_block(b) || is_peer_file(b);
  if (bars_a && bars_b) {
    std::vector<Series> s = block_series(a, a_name, false);
    for (Series& x : block_series(b, b_name, false)) s.push_back(std::move(x));
    return bar_chart("block breakdown: " + a_name + " vs " + b_name, s);
  }
  if (is_timeline(a) && is_timeline(b)) {
    std::vector<TimelineRow> rows = timeline_rows(a, a_name + ": ");
    for (TimelineRow& r : timeline_rows(b, b_name + ": ")) rows.push_back(std::move(r));
    return timeline("timelines: " + a_name + " vs " + b_name, rows);
  }
  H3RT_FAIL("bench compare --plot: ", a_name, " and ", b_name,
            " must both be block reports (bench block, or a peer block JSON) or both step / "
            "sample reports");
}

void write_svg(const std::string& path, const std::string& svg) {
  io::write_file_atomically(
      path, [&](std::FILE* f) { return std::fwrite(svg.data(), 1, svg.size(), f) == svg.size(); });
}

json peer_for_block_report(const json& file, const std::string& source, const std::string& gemm) {
  H3RT_CHECK(is_peer_file(file), source,
             ": not a peer block JSON (bench/torch_block.py --json: an object with results)");
  const json& r = first_peer_result(file, gemm);
  return {{"source", source},
          {"what", file.value("what", std::string("peer"))},
          {"block_ms", r.value("block_ms", 0.0)},
          {"components_ms", r.at("components_ms")}};
}

}  // namespace h3rt::bench
