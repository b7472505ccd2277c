#include "bench/telemetry.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace h3rt::bench {
namespace {

using Clock = std::chrono::steady_clock;

bool inside(double t, const std::vector<Interval>& intervals) {
  for (const Interval& i : intervals)
    if (t >= i.begin_ms && t <= i.end_ms) return true;
  return false;
}

nlohmann::json number_or_null(bool known, double v) {
  return known ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

TelemetrySampler::TelemetrySampler(std::unique_ptr<TelemetrySource> source, double period_ms)
    : source_(std::move(source)), period_ms_(period_ms) {
  reason_ = source_ ? source_->unavailable_reason() : "no telemetry source";
}

TelemetrySampler::~TelemetrySampler() {
  stop();
}

double TelemetrySampler::now_ms() const {
  return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
}

void TelemetrySampler::start() {
  if (!available() || running_.exchange(true)) return;
  thread_ = std::thread([this] { run(); });
}

void TelemetrySampler::stop() {
  running_ = false;
  if (thread_.joinable()) thread_.join();
}

void TelemetrySampler::run() {
  const auto period = std::chrono::duration<double, std::milli>(period_ms_);
  auto next = Clock::now();
  while (running_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      TelemetrySample s;
      s.t_ms = now_ms();
      if (source_->read(s)) samples_.push_back(s);
    }
    next += std::chrono::duration_cast<Clock::duration>(period);
    std::this_thread::sleep_until(next);
  }
}

std::vector<TelemetrySample> TelemetrySampler::samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return samples_;
}

std::optional<double> TelemetrySampler::energy_mj() {
  if (!available()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  return source_->energy_mj();
}

nlohmann::json TelemetrySampler::header_json() {
  if (!available()) return {{"available", false}, {"reason", reason_}};
  std::optional<double> limit;
  {
    std::lock_guard<std::mutex> lock(mu_);
    limit = source_->power_limit_w();
  }
  return {{"available", true},
          {"source", source_->description()},
          {"sample_period_ms", period_ms_},
          {"power_limit_w", number_or_null(limit.has_value(), limit.value_or(0))}};
}

PowerSummary summarize(const std::vector<TelemetrySample>& samples,
                       const std::vector<Interval>& intervals) {
  PowerSummary r;
  std::vector<double> clocks;
  double power = 0;
  int capped = 0, known = 0;
  for (const TelemetrySample& s : samples) {
    if (!inside(s.t_ms, intervals)) continue;
    clocks.push_back(s.sm_clock_mhz);
    power += s.power_w;
    if (s.power_capped >= 0) {
      ++known;
      capped += s.power_capped;
    }
  }
  r.samples = static_cast<int>(clocks.size());
  if (clocks.empty()) return r;
  std::sort(clocks.begin(), clocks.end());
  r.sm_clock_mhz_median = clocks[clocks.size() / 2];
  r.sm_clock_mhz_min = clocks.front();
  r.power_w_mean = power / r.samples;
  if (known) r.power_capped_fraction = static_cast<double>(capped) / known;
  return r;
}

std::optional<double> EnergyWindow::joules_per_unit() const {
  if (!begin_mj || !end_mj || units <= 0 || *end_mj < *begin_mj) return std::nullopt;
  return (*end_mj - *begin_mj) / 1e3 / units;
}

nlohmann::json power_json(const PowerSummary& s, double unit_ms, const std::string& joules_key) {
  const bool any = s.samples > 0;
  return {{"samples", s.samples},
          {"sm_clock_mhz_median", number_or_null(any, s.sm_clock_mhz_median)},
          {"sm_clock_mhz_min", number_or_null(any, s.sm_clock_mhz_min)},
          {"power_w_mean", number_or_null(any, s.power_w_mean)},
          {"power_capped_fraction",
           number_or_null(any && s.power_capped_fraction >= 0, s.power_capped_fraction)},
          {joules_key, number_or_null(any, s.power_w_mean * unit_ms / 1e3)}};
}

std::string telemetry_line(const nlohmann::json& header, const PowerSummary& s,
                           const EnergyWindow& e, const std::string& unit) {
  if (!header.value("available", false))
    return "telemetry unavailable: " + header.value("reason", std::string("?"));
  char b[160];
  std::snprintf(b, sizeof b, "SM clock median %.0f MHz (min %.0f), mean %.0f W over %d samples",
                s.sm_clock_mhz_median, s.sm_clock_mhz_min, s.power_w_mean, s.samples);
  std::string line = b;
  if (const auto j = e.joules_per_unit()) {
    std::snprintf(b, sizeof b, ", %.2f J per %s", *j, unit.c_str());
    line += b;
  }
  return line;
}

nlohmann::json sustained_json(const SustainedRun& r, const std::string& unit) {
  if (r.wall_ms <= 0 || r.energy.units <= 0) return nullptr;
  const double ms = r.wall_ms / r.energy.units;
  nlohmann::json j = power_json(r.power, ms, "joules_per_" + unit + "_from_mean_power");
  const auto joules = r.energy.joules_per_unit();
  j[unit + "s"] = r.energy.units;
  j["wall_ms_per_" + unit] = ms;
  j["joules_per_" + unit] = number_or_null(joules.has_value(), joules.value_or(0));
  return j;
}

nlohmann::json block_telemetry_json(const BlockTelemetry& t, double block_ms,
                                    const std::map<std::string, double>& component_ms) {
  nlohmann::json j = t.header;
  if (!j.value("available", false)) return j;
  nlohmann::json block = power_json(t.block, block_ms, "joules_per_block_from_mean_power");
  const auto joules = t.block_energy.joules_per_unit();
  block["joules_per_block"] = number_or_null(joules.has_value(), joules.value_or(0));
  block["joules_per_block_note"] =
      "energy counter over the uninstrumented repetitions (with the input refill between them)";
  j["block"] = block;
  nlohmann::json comps = nlohmann::json::object();
  for (const auto& [name, ms] : component_ms) {
    const auto it = t.components.find(name);
    comps[name] = power_json(it == t.components.end() ? PowerSummary{} : it->second, ms,
                             "joules_from_mean_power");
  }
  j["components"] = comps;
  j["components_note"] =
      "samples taken while the component ran in the instrumented repetitions; joules = mean "
      "power x p50 time (short components get few or no samples)";
  nlohmann::json run = sustained_json(t.sustained, "block");
  if (!run.is_null()) {
    run["note"] =
        "the block's CUDA graph replayed back to back (an input refill before each, counted), "
        "host wall time and the energy counter around the whole run";
    j["sustained"] = run;
  }
  return j;
}

nlohmann::json step_telemetry_json(const StepTelemetry& t) {
  nlohmann::json j = power_json(t.power, t.step_ms, "joules_per_step_from_mean_power");
  const auto joules = t.energy.joules_per_unit();
  j["joules_per_step"] = number_or_null(joules.has_value(), joules.value_or(0));
  j["steps"] = t.energy.units;
  return j;
}

nlohmann::json steps_telemetry_json(const nlohmann::json& header,
                                    const std::vector<StepTelemetry>& runs) {
  nlohmann::json j = header;
  if (!j.value("available", false)) return j;
  for (const StepTelemetry& t : runs) j[t.name] = step_telemetry_json(t);
  j["note"] =
      "per run of steps: clock and power samples over the steps' wall time; joules_per_step "
      "from the energy counter around them (host work included)";
  return j;
}

}  // namespace h3rt::bench
