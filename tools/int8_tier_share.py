#!/usr/bin/env python3
"""Share of 512-column units that the int32 tier of the integer rotation admits
(rotate_int32.h: every 256-value group of the unit spans at most `span` binades over its
nonzero bf16 values), for SwiGLU-shaped rows (bf16(silu(a)) * bf16(b), a and b standard
normal) and Gaussian rows, at the tier's limit (14) and at wider ones. The e_min >= 7 part of
the rule never binds at these magnitudes. Host simulation, numpy only:
    python3 tools/int8_tier_share.py [units]
"""
import sys

import numpy as np


def bf16(x):
    b = x.astype(np.float32).view(np.uint32)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000  # round to nearest even
    return b.astype(np.uint32).view(np.float32)


def admitted(y, span):
    e = ((y.view(np.uint32) >> 23) & 0xFF).astype(np.int32)
    ok = np.ones(y.shape[0], bool)
    for g in range(y.shape[1] // 256):
        eg, nz = e[:, g * 256:(g + 1) * 256], y[:, g * 256:(g + 1) * 256] != 0
        e_max = np.where(nz, eg, -1).max(1)
        e_min = np.where(nz, eg, 999).min(1)
        ok &= (e_max - e_min <= span) | ~nz.any(1)
    return ok.mean()


def main():
    units = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
    rng = np.random.default_rng(0)
    a = rng.standard_normal((units, 512)).astype(np.float32)
    b = rng.standard_normal((units, 512)).astype(np.float32)
    rows = {"swiglu": bf16(bf16(a / (1 + np.exp(-a))) * bf16(b)), "gaussian": bf16(a)}
    for name, y in rows.items():
        shares = ", ".join(f"span<={s}: {admitted(y, s):.3f}" for s in (14, 15, 16, 18, 20))
        print(f"{name:9s} {shares}")


if __name__ == "__main__":
    main()
