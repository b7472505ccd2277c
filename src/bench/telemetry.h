// GPU telemetry around timed regions of the benchmarks: SM clock (MHz), board power (W) and the
// total energy counter (mJ), read from a TelemetrySource. The NVML source loads the driver's
// libnvidia-ml.so.1 at run time (nothing links it), so a machine without the driver library
// reports "unavailable" with the reason instead of failing. A sampler thread reads clock and
// power every few milliseconds; the benchmarks attribute samples to components or steps by
// host time and read the energy counter before and after a set of repetitions.
// CPU code: the reductions and the report fields are tested in CI with a fake source.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace h3rt::bench {

struct TelemetrySample {
  double t_ms = 0;          // the sampler's clock (TelemetrySampler::now_ms)
  double sm_clock_mhz = 0;  // current SM clock
  double power_w = 0;       // board power
  // 1: the driver reports the clocks held down for power (software power cap or hardware power
  // brake); 0: not; -1: unknown
  int power_capped = -1;
};

// What a benchmark reads telemetry from: NVML on a GPU, a fake in the tests.
class TelemetrySource {
 public:
  virtual ~TelemetrySource() = default;
  // Empty when readings work; otherwise why they do not ("libnvidia-ml.so.1 not found").
  virtual std::string unavailable_reason() const = 0;
  virtual std::string description() const = 0;  // what is read and how, for the report
  // Fills sm_clock_mhz, power_w and power_capped; false when the reading failed.
  virtual bool read(TelemetrySample& s) = 0;
  virtual std::optional<double> energy_mj() = 0;  // total energy counter
  virtual std::optional<double> power_limit_w() = 0;
};

// NVML for the GPU with this PCI bus id (cudaDeviceGetPCIBusId; empty: NVML device 0), loaded
// from `library`. Never throws: an unusable NVML gives a source whose unavailable_reason says why.
std::unique_ptr<TelemetrySource> make_nvml_telemetry(
    const std::string& pci_bus_id, const std::string& library = "libnvidia-ml.so.1");

// Reads the source every `period_ms` on a background thread between start() and stop().
class TelemetrySampler {
 public:
  explicit TelemetrySampler(std::unique_ptr<TelemetrySource> source, double period_ms = 5.0);
  ~TelemetrySampler();
  TelemetrySampler(const TelemetrySampler&) = delete;
  TelemetrySampler& operator=(const TelemetrySampler&) = delete;

  bool available() const { return reason_.empty(); }
  double now_ms() const;  // host steady clock, the samples' time base
  void start();           // no-op when unavailable or running
  void stop();
  std::vector<TelemetrySample> samples() const;
  std::optional<double> energy_mj();
  // The report header: availability, source, period, power limit.
  nlohmann::json header_json();

 private:
  void run();
  std::unique_ptr<TelemetrySource> source_;
  std::string reason_;
  double period_ms_;
  mutable std::mutex mu_;  // source_ calls and samples_
  std::vector<TelemetrySample> samples_;
  std::atomic<bool> running_{false};
  std::thread thread_;
};

struct Interval {
  double begin_ms = 0, end_ms = 0;
};

// Samples whose time falls in any of the intervals, reduced.
struct PowerSummary {
  int samples = 0;
  double sm_clock_mhz_median = 0, sm_clock_mhz_min = 0, power_w_mean = 0;
  double power_capped_fraction = -1;  // of the samples that know; -1: none knows
};
PowerSummary summarize(const std::vector<TelemetrySample>& samples,
                       const std::vector<Interval>& intervals);

// Energy counter readings around `units` repetitions (blocks, steps).
struct EnergyWindow {
  std::optional<double> begin_mj, end_mj;
  int units = 0;
  std::optional<double> joules_per_unit() const;
};

// {"samples", "sm_clock_mhz_median", "sm_clock_mhz_min", "power_w_mean",
// "power_capped_fraction", joules_key: mean power x unit_ms} (figures null without samples).
nlohmann::json power_json(const PowerSummary& s, double unit_ms, const std::string& joules_key);

// One line for stderr: "SM clock median 1725 MHz (min 1500), mean 650 W, 46.1 J per block", or
// "telemetry unavailable: <reason>".
std::string telemetry_line(const nlohmann::json& header, const PowerSummary& s,
                           const EnergyWindow& e, const std::string& unit);

// A run of units launched back to back (bench block --sustain, bench attention --sustain): the
// samples and the energy counter over wall_ms of host time. wall_ms 0: not run.
struct SustainedRun {
  PowerSummary power;
  EnergyWindow energy;  // units: how many ran
  double wall_ms = 0;
};
// {"<unit>s", "wall_ms_per_<unit>", "joules_per_<unit>" (energy counter) and power_json's fields
// with "joules_per_<unit>_from_mean_power"}; null when the run did not happen.
nlohmann::json sustained_json(const SustainedRun& r, const std::string& unit);

// Telemetry of one bench block run: the block (uninstrumented repetitions, energy counter) and
// each component (instrumented repetitions). header: TelemetrySampler::header_json.
struct BlockTelemetry {
  nlohmann::json header = {{"available", false}, {"reason", "not measured"}};
  PowerSummary block;
  EnergyWindow block_energy;
  std::map<std::string, PowerSummary> components;
  // bench block --sustain: the block's CUDA graph replayed back to back (an input refill before
  // each).
  SustainedRun sustained;
};
// The report's "telemetry" object; block_ms and component_ms are the p50 times.
nlohmann::json block_telemetry_json(const BlockTelemetry& t, double block_ms,
                                    const std::map<std::string, double>& component_ms);

// Telemetry of a run of steps: figures over the steps' wall time, joules per step from the
// energy counter around them.
struct StepTelemetry {
  std::string name;  // "eager", "cuda_graph", "run"
  PowerSummary power;
  EnergyWindow energy;
  double step_ms = 0;  // p50 wall time of a step
};
nlohmann::json step_telemetry_json(const StepTelemetry& t);
// The report's "telemetry" object: header, then one step_telemetry_json per run when available.
nlohmann::json steps_telemetry_json(const nlohmann::json& header,
                                    const std::vector<StepTelemetry>& runs);

}  // namespace h3rt::bench
