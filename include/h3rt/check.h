// One error style for the whole project: H3RT_CHECK(cond, msg...) throws h3rt::Error whose
// message is the caller's text followed by the failed expression, file and line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace h3rt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

[[noreturn]] void fail(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace detail
}  // namespace h3rt

#define H3RT_CHECK(cond, ...)                                                               \
  do {                                                                                      \
    if (!(cond))                                                                            \
      ::h3rt::detail::fail(#cond, __FILE__, __LINE__, ::h3rt::detail::concat(__VA_ARGS__)); \
  } while (0)

#define H3RT_FAIL(...) \
  ::h3rt::detail::fail(nullptr, __FILE__, __LINE__, ::h3rt::detail::concat(__VA_ARGS__))
