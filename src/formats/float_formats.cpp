#include <cmath>
#include <cstring>

#include "h3rt/formats.h"

namespace h3rt {
namespace {

// Round |f| (finite, non-negative) to a binary format with `mbits` mantissa bits, minimum normal
// exponent `emin` and subnormals below it; returns the rounded value as float. Exact because
// every such value is representable in float and the scaling by powers of two is exact.
float round_to_format(float a, int mbits, int emin) {
  if (a == 0.0f) return 0.0f;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = std::max(e - 1, emin);
  float quantum = std::ldexp(1.0f, exp - mbits);
  float q = a / quantum;        // exact: division by a power of two
  float r = std::nearbyint(q);  // default rounding mode: ties to even
  return r * quantum;
}

}  // namespace

// ---- fp16 ----
float f16_to_f32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31)
    v = man ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return 0x7e00;
  float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  float r = round_to_format(a, 10, -14);
  if (r == 0.0f) return sign;
  int e;
  std::frexp(r, &e);
  int exp = e - 1;
  if (exp < -14) return sign | static_cast<uint16_t>(std::ldexp(r, 24));  // subnormal
  uint32_t man = static_cast<uint32_t>(std::ldexp(r, 10 - exp)) - 0x400u;
  return sign | static_cast<uint16_t>((exp + 15) << 10) | static_cast<uint16_t>(man);
}

// ---- e4m3 ----
float e4m3_to_f32(uint8_t v) {
  uint32_t sign = v >> 7, exp = (v >> 3) & 0xfu, man = v & 7u;
  if (exp == 15 && man == 7) return NAN;
  float r = exp == 0 ? std::ldexp(static_cast<float>(man), -9)
                     : std::ldexp(static_cast<float>(man | 8u), static_cast<int>(exp) - 10);
  return sign ? -r : r;
}

uint8_t f32_to_e4m3_satfinite(float f) {
  if (std::isnan(f)) return 0x7f;
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  float r = round_to_format(a, 3, -6);
  if (r >= 448.0f) return sign | 0x7e;  // values in (448, 464) round down to 448 by satfinite
  if (r == 0.0f) return sign;
  int e;
  std::frexp(r, &e);
  int exp = e - 1;
  if (exp < -6) return sign | static_cast<uint8_t>(std::ldexp(r, 9));  // subnormal
  uint32_t man = static_cast<uint32_t>(std::ldexp(r, 3 - exp)) - 8u;
  return sign | static_cast<uint8_t>((exp + 7) << 3) | static_cast<uint8_t>(man);
}

// ---- e2m1 ----
float e2m1_to_f32(uint8_t code) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float v = kValues[code & 7u];
  return (code & 8u) ? -v : v;
}

uint8_t f32_to_e2m1(float f) {
  if (std::isnan(f)) return 0x7;
  uint8_t sign = std::signbit(f) ? 0x8 : 0;
  float a = std::fabs(f);
  if (a >= 6.0f) return sign | 0x7;
  float r = round_to_format(a, 1, 0);  // 1 mantissa bit, min normal exponent 0, subnormal 0.5
  if (r >= 6.0f) return sign | 0x7;
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint8_t c = 0; c < 8; ++c)
    if (kValues[c] == r) return sign | c;
  return sign | 0x7;  // unreachable for finite input
}

}  // namespace h3rt
