#include "core/env.h"

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

}  // namespace h3rt
