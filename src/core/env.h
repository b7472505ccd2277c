// The H3RT_* environment switches that select kernels for side-by-side runs. A value the
// switch does not know is an error naming the variable and what it accepts, never a silent
// default.
#pragma once

namespace h3rt {

// An on/off switch: unset or empty gives `fallback`, "0" off, "1" on; anything else throws.
bool env_switch(const char* name, bool fallback);

// A count: unset or empty gives `fallback`; a decimal integer in [lo, hi], else throws.
int env_count(const char* name, int fallback, int lo, int hi);

}  // namespace h3rt
