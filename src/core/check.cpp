#include "h3rt/check.h"

namespace h3rt::detail {

void fail(const char* expr, const char* file, int line, const std::string& msg) {
  std::ostringstream os;
  os << (msg.empty() ? std::string("internal check failed") : msg) << " [";
  if (expr) os << "check `" << expr << "` ";
  os << "at " << file << ":" << line << "]";
  throw Error(os.str());
}

}  // namespace h3rt::detail
