#include "h3rt/check.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace h3rt {

namespace {

bool debug_env() {
  const char* v = std::getenv("H3RT_DEBUG");
  return v && *v && std::strcmp(v, "0") != 0;
}

std::atomic<bool>& locations() {
  static std::atomic<bool> on{debug_env()};
  return on;
}

}  // namespace

void set_error_locations(bool on) {
  locations() = on;
}

bool error_locations() {
  return locations();
}

namespace detail {

void fail(const char* expr, const char* file, int line, const std::string& msg) {
  if (!msg.empty() && !error_locations()) throw Error(msg);
  std::ostringstream os;
  os << (msg.empty() ? std::string("internal check failed") : msg) << " [";
  if (expr) os << "check `" << expr << "` ";
  os << "at " << file << ":" << line << "]";
  throw Error(os.str());
}

}  // namespace detail
}  // namespace h3rt
