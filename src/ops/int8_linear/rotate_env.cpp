#include <cstdlib>
#include <cstring>

#include "ops/int8_linear/int8_fused.h"

namespace h3rt::ops {

Int8RotateMath int8_rotate_env(Int8RotateMath m) {
  const char* e = std::getenv("H3RT_INT8_ROTATE");
  if (m != Int8RotateMath::kAuto || !e || !*e) return m;
  if (!std::strcmp(e, "double")) return Int8RotateMath::kDouble;
  if (!std::strcmp(e, "integer")) return Int8RotateMath::kInteger;
  H3RT_FAIL("H3RT_INT8_ROTATE=", e,
            ": expected double or integer, or unset for this GPU's default rotation form");
}

}  // namespace h3rt::ops
