#include "core/env.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "h3rt/check.h"

namespace h3rt {

bool env_switch(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  if (!std::strcmp(v, "0")) return false;
  if (!std::strcmp(v, "1")) return true;
  H3RT_FAIL(name, "=", v, ": expected 0 (off) or 1 (on), or unset for the default (",
            fallback ? "on" : "off", ")");
}

int env_count(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  H3RT_CHECK(*end == '\0' && errno == 0 && n >= lo && n <= hi, name, "=", v,
             ": expected a whole number from ", lo, " to ", hi, ", or unset for the default (",
             fallback, ")");
  return static_cast<int>(n);
}

}  // namespace h3rt
