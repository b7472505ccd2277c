// Option words shared by the CLI, the C API and Python.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "h3rt/pipeline.h"
#include "model/weights.h"

namespace h3rt {

Device parse_device(const std::string& s, const char* what) {
  if (s == "cpu") return Device::cpu;
  H3RT_CHECK(s == "cuda", what, " must be cpu or cuda, got '", s, "'");
  return Device::cuda;
}

Precision parse_precision(const std::string& s, const char* what) {
  if (s == "fp32") return Precision::fp32;
  H3RT_CHECK(s == "bf16", what, " must be fp32 or bf16, got '", s, "'");
  return Precision::bf16;
}

Attention parse_attention(const std::string& s, const char* what) {
  if (s == "bf16") return Attention::bf16;
  H3RT_CHECK(s == "sage", what, " must be bf16 or sage, got '", s, "'");
  return Attention::sage;
}

Fp8Activations parse_fp8_activations(const std::string& s, const char* what) {
  if (s.empty() || s == "static") return Fp8Activations::static_scale;
  H3RT_CHECK(s == "dynamic", what, " must be static or dynamic, got '", s, "'");
  return Fp8Activations::dynamic;
}

CheckFinite parse_check_finite(const std::string& s, const char* what) {
  if (s.empty() || s == "first") return CheckFinite::first_step;
  if (s == "off") return CheckFinite::off;
  H3RT_CHECK(s == "all", what, " must be off, first or all, got '", s, "'");
  return CheckFinite::every_step;
}

const char* weight_stream_source_name(WeightStreamSource s) {
  switch (s) {
    case WeightStreamSource::pinned:
      return "pinned";
    case WeightStreamSource::file:
      return "file";
    default:
      return "auto";
  }
}

WeightStreamSource parse_weight_stream_source(const std::string& s, const char* what) {
  for (WeightStreamSource v :
       {WeightStreamSource::automatic, WeightStreamSource::pinned, WeightStreamSource::file})
    if (s == weight_stream_source_name(v)) return v;
  H3RT_FAIL(what, " must be auto, pinned or file, got '", s, "'");
}

int64_t parse_memory_size(const std::string& s, const char* what) {
  static const struct {
    const char* unit;
    double scale;
  } units[] = {{"", 1},
               {"b", 1},
               {"kb", 1e3},
               {"mb", 1e6},
               {"gb", 1e9},
               {"tb", 1e12},
               {"kib", 1024.0},
               {"mib", 1048576.0},
               {"gib", 1073741824.0},
               {"tib", 1099511627776.0}};
  if (s == "auto") return kDeviceMemoryAuto;
  const char* begin = s.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  std::string unit(end);
  for (char& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const bool number = end != begin && !std::isspace(static_cast<unsigned char>(*begin));
  for (const auto& u : units) {
    if (!number || unit != u.unit) continue;
    const double bytes = v * u.scale;
    H3RT_CHECK(std::isfinite(bytes) && bytes >= 0 && bytes < 9.2e18, what,
               " must be a size >= 0 (0: no limit) or auto, got '", s, "'");
    return static_cast<int64_t>(std::llround(bytes));
  }
  H3RT_FAIL(what, " must be a size: a number of bytes (2.5e10) or with a unit GB/MB/TB (powers ",
            "of 1000) or GiB/MiB/TiB (powers of 1024), e.g. 24GB or 24GiB, or auto (the GPU's ",
            "free memory); got '", s, "'");
}

int64_t auto_device_memory_limit(int64_t free_bytes, int64_t total_bytes) {
  const int64_t reserve = std::max<int64_t>(int64_t(3) << 29, total_bytes / 20);
  return std::max<int64_t>(1, free_bytes - reserve);
}

namespace {
constexpr std::pair<SyntheticGemm, const char*> kGemmNames[] = {{SyntheticGemm::bf16, "bf16"},
                                                                {SyntheticGemm::fp8, "fp8"},
                                                                {SyntheticGemm::int8, "int8"},
                                                                {SyntheticGemm::nvfp4, "nvfp4"}};
}  // namespace

SyntheticGemm parse_synthetic_gemm(const std::string& s, const char* what) {
  for (const auto& [g, name] : kGemmNames)
    if (s == name) return g;
  H3RT_FAIL(what, " must be bf16, fp8, int8 or nvfp4, got '", s, "'");
}

int synthetic_int8_group(const H3Config& c, int requested) {
  if (requested >= 0) return requested;
  int64_t g = 0;  // the gcd of the block projections' input sizes
  for (const model::WeightSpec& w : model::weight_specs(c))
    if (w.key.rfind("blocks.", 0) == 0 && w.shape.size() == 2 &&
        w.key.find("adaln") == std::string::npos)
      g = std::gcd(g, w.shape[1]);
  for (int group : {256, 64, 16})
    if (g % group == 0) return group;
  return 0;
}

const char* synthetic_gemm_name(SyntheticGemm g) {
  for (const auto& [k, name] : kGemmNames)
    if (k == g) return name;
  return "bf16";
}

}  // namespace h3rt
