#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

#include "core/cuda_text.h"
#include "cuda/runtime.h"

namespace h3rt::cuda {

void fail_cuda(cudaError_t err, const char* expr, const char* file, int line) {
  std::ostringstream os;
  os << "CUDA error " << cudaGetErrorName(err) << ": " << cudaGetErrorString(err) << " (in `"
     << expr << "`";
  if (error_locations()) os << " at " << file << ":" << line;  // developer detail
  os << ")";
  throw Error(os.str());
}

cudaError_t check_launch(const char* what, const char* file, int line) {
  cudaError_t err = cudaGetLastError();
#if defined(H3RT_DEBUG_SYNC) || !defined(NDEBUG)
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
#endif
  if (err != cudaSuccess && error_locations())  // developer detail, as in fail_cuda
    std::fprintf(stderr, "h3rt: kernel %s failed: %s (%s:%d)\n", what, cudaGetErrorString(err),
                 file, line);
  else if (err != cudaSuccess)
    std::fprintf(stderr, "h3rt: kernel %s failed: %s\n", what, cudaGetErrorString(err));
  return err;
}

std::string device_unavailable_text(cudaError_t count_error, int count, int driver_version,
                                    int runtime_version) {
  if (count_error == cudaSuccess && count > 0) return {};
  const std::string none = "no CUDA device is available";
  if (count_error == cudaSuccess || count_error == cudaErrorNoDevice)
    return none + " (the NVIDIA driver lists no GPU; see nvidia-smi and CUDA_VISIBLE_DEVICES)";
  if (count_error == cudaErrorInsufficientDriver && driver_version == 0)
    return none + " (no NVIDIA driver was found)";
  if (count_error == cudaErrorInsufficientDriver)
    return none + " (the NVIDIA driver supports CUDA " + cuda_version_text(driver_version) +
           ", older than the CUDA " + cuda_version_text(runtime_version) +
           " runtime this build uses: update the driver)";
  return none + " (" + cudaGetErrorName(count_error) + ": " + cudaGetErrorString(count_error) + ")";
}

std::string cuda_device_unavailable_reason() {
  int n = 0, driver = 0, runtime = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  cudaGetLastError();  // not sticky: later calls start clean
  if (e != cudaSuccess) {
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
  }
  return device_unavailable_text(e, n, driver, runtime);
}

bool cuda_device_available() {
  return cuda_device_unavailable_reason().empty();
}

void require_cuda_device(const std::string& what) {
  const std::string why = cuda_device_unavailable_reason();
  if (!why.empty()) throw Error(what + " needs a CUDA device, and " + why);
}

int current_device_cc() {
  int dev = 0, major = 0, minor = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  H3RT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  H3RT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major * 10 + minor;
}

int compiled_arch_supports(int cc_major, int cc_minor, const std::string& list) {
  int best = 0;
  bool exact = false;
  for (const std::string& tok : split_arch_list(list)) {
    size_t digits = 0;
    while (digits < tok.size() && tok[digits] >= '0' && tok[digits] <= '9') ++digits;
    if (digits < 2) continue;  // "native" or garbage: not a usable arch
    int arch = std::stoi(tok.substr(0, digits));
    std::string suffix = tok.substr(digits);
    int major = arch / 10, minor = arch % 10;
    bool runs;
    if (suffix == "a")
      runs = major == cc_major && minor == cc_minor;
    else if (suffix == "f" || suffix.empty())
      runs = major == cc_major && minor <= cc_minor;
    else
      runs = false;
    if (!runs) continue;
    bool is_exact = minor == cc_minor;
    if (is_exact && !exact) {
      best = arch;
      exact = true;
    } else if (!exact && arch > best) {
      best = arch;
    }
  }
  return best;
}

namespace {
// A device attribute that never changes, queried once per device ordinal < 64 (benign race:
// every writer stores the same value).
int cached_attribute(cudaDeviceAttr attr, int device, int (&cache)[64]) {
  int n = device >= 0 && device < 64 ? cache[device] : 0;
  if (n) return n;
  H3RT_CUDA_CHECK(cudaDeviceGetAttribute(&n, attr, device));
  if (device >= 0 && device < 64) cache[device] = n;
  return n;
}
}  // namespace

int resident_grid(const void* kernel, int threads, size_t smem, int min_major) {
  int dev = 0, major = 0, per_sm = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  H3RT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major < min_major || smem > static_cast<size_t>(smem_optin(dev))) return 0;
  H3RT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  H3RT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return per_sm * sm_count(dev);
}

int sm_count(int device) {
  static int counts[64] = {};
  return cached_attribute(cudaDevAttrMultiProcessorCount, device, counts);
}

int smem_optin(int device) {
  static int bytes[64] = {};
  return cached_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device, bytes);
}

const std::string& device_name(int device) {
  static std::mutex mu;
  static std::map<int, std::string> names;
  std::lock_guard<std::mutex> lock(mu);
  auto it = names.find(device);
  if (it != names.end()) return it->second;
  cudaDeviceProp prop{};
  H3RT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return names.emplace(device, prop.name).first->second;
}

bool compiled_arch_listed(const std::string& arch) {
#ifdef H3RT_CUDA_ARCH_LIST
  const std::string list = std::string(",") + H3RT_CUDA_ARCH_LIST + ",";
  return list.find("," + arch + ",") != std::string::npos;
#else
  (void)arch;
  return false;
#endif
}

std::string arch_support_error(int cc, const std::string& device, const std::string& list) {
  if (compiled_arch_supports(cc / 10, cc % 10, list) != 0) return "";
  const std::string arch = std::to_string(cc);
  return "this h3rt was built for CUDA archs '" + list +
         "' (H3RT_CUDA_ARCHS), which have no code for " + device + " (sm_" + arch +
         "): rebuild with -DH3RT_CUDA_ARCHS=" + arch +
         (cc == 90 || cc == 100 || cc == 120 || cc == 121 ? "a" : "") +
         " (h3rt's kernels target sm_90a, sm_100a, sm_120a and sm_121a)";
}

std::string arch_support_error(int cc, const std::string& device) {
#ifdef H3RT_CUDA_ARCH_LIST
  return arch_support_error(cc, device, H3RT_CUDA_ARCH_LIST);
#else
  return arch_support_error(cc, device, "");
#endif
}

int compiled_arch_supports(int cc_major, int cc_minor) {
#ifdef H3RT_CUDA_ARCH_LIST
  return compiled_arch_supports(cc_major, cc_minor, H3RT_CUDA_ARCH_LIST);
#else
  return 0;
#endif
}

Stream::Stream() {
  H3RT_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
}
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}
void Stream::synchronize() const {
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s_));
}

NvtxRange::NvtxRange(const char* name) {
  nvtxRangePushA(name);
}
NvtxRange::~NvtxRange() {
  nvtxRangePop();
}

}  // namespace h3rt::cuda
