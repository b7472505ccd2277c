// The compact form of swiglu's silu table, shared by host and device. The whole table has one
// entry per bf16 gate (round_bf16(silu(g)) at index g's bits, 128 KB); GPUs whose shared memory
// per block cannot hold it beside a kernel's other data (sm_120 / sm_121: 99 KB) keep 4,096 of
// its entries (8 KB) and apply three rules for the other gates:
//  - Kept: the gates whose exponent field lies in [kSiluCompactExpLo, +kSiluCompactBinades),
//    2^-8 <= |g| < 256, both signs; slot = (bits - lo) | sign << 11.
//  - |g| < 2^-8 (zeros and subnormals included): 1 + e^-g rounds to 2, so silu(g) = g / 2.
//  - finite |g| >= 256: e^-g underflows (g > 0: silu = g) or overflows (g < 0: g / inf = -0).
//  - +inf: inf; -inf (-inf / inf) and NaN: NaN.
// The rules are checked against swiglu_cpu on all 65,536 gates (tests). The compact lookup costs
// about 9 instructions per gate against 4 for the whole table (sm_90a SASS). On an H200 the fused
// int8 SwiGLU with a first, branching form of it took 0.72-0.75 ms at 864x480 against 0.66-0.71
// ms for the whole table two sessions earlier (bench/RESULTS.md, session 23; not side by side), so
// the compact form runs only where the whole table does not fit.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace h3rt::ops {

constexpr int64_t kSiluTableEntries = 65536;  // the whole table
constexpr uint32_t kSiluCompactExpLo = 119, kSiluCompactBinades = 16;
constexpr uint32_t kSiluCompactHalf = kSiluCompactBinades * 128;  // kept entries of one sign
constexpr uint32_t kSiluCompactEntries = 2 * kSiluCompactHalf;

// Whether gate bits b have a compact slot (else a rule applies), and that slot (for any b: an index
// inside the table, meaningful only where kept), so a kernel can load without branching first.
H3RT_HD inline bool silu_compact_kept(uint32_t b) {
  return (b & 0x7fffu) - (kSiluCompactExpLo << 7) < kSiluCompactHalf;
}
H3RT_HD inline uint32_t silu_compact_index(uint32_t b) {
  const uint32_t rel = (b & 0x7fffu) - (kSiluCompactExpLo << 7);
  return (rel | ((b >> 4) & kSiluCompactHalf)) & (kSiluCompactEntries - 1);
}

// The gate bits of compact slot i (the inverse of silu_compact_index on kept gates): its index in
// the whole table.
H3RT_HD inline uint32_t silu_compact_gate(uint32_t i) {
  return ((i & (kSiluCompactHalf - 1)) + (kSiluCompactExpLo << 7)) | ((i & kSiluCompactHalf) << 4);
}

// round_bf16(silu(g)) for gate bits b outside the compact table (the rules above).
H3RT_HD inline uint32_t silu_rule_bits(uint32_t b) {
  const uint32_t mag = b & 0x7fffu;
  // g / 2, rounded to bf16: exact but for subnormals
  if (mag < (kSiluCompactExpLo << 7)) return bf16_bits_rne(bits_float(b << 16) * 0.5f);
  if (mag > 0x7f80u) return b | 0x40u;                         // NaN, quieted
  if (b & 0x8000u) return mag == 0x7f80u ? 0xffc0u : 0x8000u;  // -inf -> NaN, else -0
  return b;
}

// round_bf16(silu(g)) as a float, for gate bits b (low 16 bits), from the compact table and the
// rules.
H3RT_HD inline float silu_compact_lookup(const uint16_t* compact, uint32_t b) {
  const uint32_t s = silu_compact_kept(b) ? compact[silu_compact_index(b)] : silu_rule_bits(b);
  return bits_float(s << 16);
}

}  // namespace h3rt::ops
