// CLI11 validators shared by the verbs.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <string>

namespace h3rt::cli {

// A finite number > 0. The options that take it treat 0 as "not given" internally, so an explicit
// 0, a negative value, NaN or inf is refused here (CLI::PositiveNumber lets NaN and inf through).
inline CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double v = 0;
        if (CLI::detail::lexical_cast(s, v) && std::isfinite(v) && v > 0) return {};
        return "must be a finite number > 0, got " + s;
      },
      "> 0");
}

// A finite number >= 0 (CLI::NonNegativeNumber lets NaN through, and its message prints the
// whole double range).
inline CLI::Validator non_negative_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double v = 0;
        if (CLI::detail::lexical_cast(s, v) && std::isfinite(v) && v >= 0) return {};
        return "must be a finite number >= 0, got " + s;
      },
      ">= 0");
}

// A seed: an integer in [0, 2^64) as written (CLI11 would wrap -1 to 2^64 - 1 and clamp larger
// values to it).
inline CLI::Validator seed_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const bool digits =
            !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos;
        if (digits && (s.size() < 20 || s <= "18446744073709551615")) return {};
        return "must be an integer in [0, 2^64), got " + s;
      },
      "SEED");
}

// A number in [lo, hi] (CLI::Range lets NaN through).
inline CLI::Validator number_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        if (CLI::detail::lexical_cast(s, v) && v >= lo && v <= hi) return {};
        return "must be a number in [" + CLI::detail::to_string(lo) + ", " +
               CLI::detail::to_string(hi) + "], got " + s;
      },
      "[" + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) + "]");
}

}  // namespace h3rt::cli
