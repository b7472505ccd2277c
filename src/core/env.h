// The H3RT_* environment switches that select kernels for side-by-side runs. A value the
// switch does not know is an error naming the variable and what it accepts, never a silent
// default.
#pragma once

namespace h3rt {

// An on/off switch: unset or empty gives `fallback`, "0" off, "1" on; anything else throws.
bool env_switch(const char* name, bool fallback);

}  // namespace h3rt
