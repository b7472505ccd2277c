// The NVML telemetry source: libnvidia-ml is opened with dlopen and the few entry points used
// are declared here with NVML's stable C ABI (nvml.h is not needed to build, and a binary never
// fails to load for want of the driver library).
#include <dlfcn.h>

#include <cstdint>
#include <cstring>

#include "bench/telemetry.h"

namespace h3rt::bench {
namespace {

using nvmlReturn = int;  // NVML_SUCCESS = 0
using nvmlDevice = void*;
constexpr int kClockSm = 1;                         // NVML_CLOCK_SM
constexpr unsigned kFieldPowerInstant = 186;        // NVML_FI_DEV_POWER_INSTANT (mW)
constexpr unsigned long long kSwPowerCap = 0x4;     // nvmlClocksEventReasonSwPowerCap
constexpr unsigned long long kHwPowerBrake = 0x80;  // nvmlClocksEventReasonHwPowerBrakeSlowdown

// nvmlFieldValue_t.
struct FieldValue {
  unsigned field_id, scope_id;
  long long timestamp, latency_us;
  int value_type;  // 0 double, 1 uint, 2 ulong, 3 ulonglong, 4 slonglong, 5 sint, 6 ushort
  nvmlReturn ret;
  union {
    double d;
    unsigned ui;
    unsigned long ul;
    unsigned long long ull;
    long long sll;
    int si;
    unsigned short us;
  } value;
};

double field_number(const FieldValue& f) {
  switch (f.value_type) {
    case 0:
      return f.value.d;
    case 1:
      return f.value.ui;
    case 2:
      return static_cast<double>(f.value.ul);
    case 3:
      return static_cast<double>(f.value.ull);
    case 4:
      return static_cast<double>(f.value.sll);
    case 5:
      return f.value.si;
    case 6:
      return f.value.us;
  }
  return -1;
}

struct Api {
  nvmlReturn (*init)() = nullptr;
  nvmlReturn (*shutdown)() = nullptr;
  nvmlReturn (*by_bus_id)(const char*, nvmlDevice*) = nullptr;
  nvmlReturn (*by_index)(unsigned, nvmlDevice*) = nullptr;
  nvmlReturn (*clock)(nvmlDevice, int, unsigned*) = nullptr;
  nvmlReturn (*power)(nvmlDevice, unsigned*) = nullptr;
  nvmlReturn (*energy)(nvmlDevice, unsigned long long*) = nullptr;
  nvmlReturn (*limit)(nvmlDevice, unsigned*) = nullptr;
  nvmlReturn (*fields)(nvmlDevice, int, FieldValue*) = nullptr;      // optional
  nvmlReturn (*reasons)(nvmlDevice, unsigned long long*) = nullptr;  // optional
};

template <typename F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

class NvmlSource final : public TelemetrySource {
 public:
  NvmlSource(const std::string& bus_id, const std::string& library) {
    lib_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
      reason_ = library + " not found (no NVIDIA driver library)";
      return;
    }
    if (!bind_all()) return;
    if (api_.init() != 0) {
      reason_ = "nvmlInit failed (no NVIDIA driver loaded?)";
      return;
    }
    initialised_ = true;
    const nvmlReturn r =
        bus_id.empty() ? api_.by_index(0, &dev_) : api_.by_bus_id(bus_id.c_str(), &dev_);
    if (r != 0) {
      reason_ = "NVML has no device " + (bus_id.empty() ? std::string("0") : bus_id);
      return;
    }
    unsigned mhz = 0;
    if (api_.clock(dev_, kClockSm, &mhz) != 0) reason_ = "NVML cannot read the SM clock";
    instant_power_ = read_instant_power().has_value();
  }

  ~NvmlSource() override {
    if (initialised_) api_.shutdown();
    if (lib_) dlclose(lib_);
  }

  std::string unavailable_reason() const override { return reason_; }

  std::string description() const override {
    return std::string("NVML: SM clock (nvmlDeviceGetClockInfo), ") +
           (instant_power_ ? "instantaneous power (field NVML_FI_DEV_POWER_INSTANT)"
                           : "power from nvmlDeviceGetPowerUsage (a 1 s average on Ampere and "
                             "newer)") +
           ", energy from nvmlDeviceGetTotalEnergyConsumption";
  }

  bool read(TelemetrySample& s) override {
    unsigned mhz = 0, mw = 0;
    if (api_.clock(dev_, kClockSm, &mhz) != 0) return false;
    std::optional<double> w = instant_power_ ? read_instant_power() : std::nullopt;
    if (!w) {
      if (api_.power(dev_, &mw) != 0) return false;
      w = mw / 1e3;
    }
    s.sm_clock_mhz = mhz;
    s.power_w = *w;
    unsigned long long bits = 0;
    s.power_capped = api_.reasons && api_.reasons(dev_, &bits) == 0
                         ? ((bits & (kSwPowerCap | kHwPowerBrake)) != 0)
                         : -1;
    return true;
  }

  std::optional<double> energy_mj() override {
    unsigned long long mj = 0;
    if (api_.energy(dev_, &mj) != 0) return std::nullopt;
    return static_cast<double>(mj);
  }

  std::optional<double> power_limit_w() override {
    unsigned mw = 0;
    if (api_.limit(dev_, &mw) != 0) return std::nullopt;
    return mw / 1e3;
  }

 private:
  bool bind_all() {
    const bool ok = bind(lib_, "nvmlInit_v2", api_.init) &&
                    bind(lib_, "nvmlShutdown", api_.shutdown) &&
                    bind(lib_, "nvmlDeviceGetHandleByPciBusId_v2", api_.by_bus_id) &&
                    bind(lib_, "nvmlDeviceGetHandleByIndex_v2", api_.by_index) &&
                    bind(lib_, "nvmlDeviceGetClockInfo", api_.clock) &&
                    bind(lib_, "nvmlDeviceGetPowerUsage", api_.power) &&
                    bind(lib_, "nvmlDeviceGetTotalEnergyConsumption", api_.energy) &&
                    bind(lib_, "nvmlDeviceGetEnforcedPowerLimit", api_.limit);
    if (!ok) reason_ = "the NVML library lacks an entry point h3rt reads (driver too old?)";
    bind(lib_, "nvmlDeviceGetFieldValues", api_.fields);
    if (!bind(lib_, "nvmlDeviceGetCurrentClocksEventReasons", api_.reasons))
      bind(lib_, "nvmlDeviceGetCurrentClocksThrottleReasons", api_.reasons);
    return ok;
  }

  std::optional<double> read_instant_power() {
    if (!api_.fields) return std::nullopt;
    FieldValue f;
    std::memset(&f, 0, sizeof f);
    f.field_id = kFieldPowerInstant;
    if (api_.fields(dev_, 1, &f) != 0 || f.ret != 0) return std::nullopt;
    const double mw = field_number(f);
    if (mw <= 0) return std::nullopt;
    return mw / 1e3;
  }

  void* lib_ = nullptr;
  Api api_;
  nvmlDevice dev_ = nullptr;
  bool initialised_ = false, instant_power_ = false;
  std::string reason_;
};

}  // namespace

std::unique_ptr<TelemetrySource> make_nvml_telemetry(const std::string& pci_bus_id,
                                                     const std::string& library) {
  return std::make_unique<NvmlSource>(pci_bus_id, library);
}

}  // namespace h3rt::bench
