// One error style for the whole project: H3RT_CHECK(cond, msg...) throws h3rt::Error whose
// message is the caller's text: what failed, which file/tensor/option, what was expected. The
// failed expression, source file and line follow it only when error locations are on (the
// environment variable H3RT_DEBUG=1, `h3rt --verbose`, or set_error_locations(true)) and for
// internal checks without a message.
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

// Whether error messages carry the failed check's expression, file and line (developer detail).
// The default comes from H3RT_DEBUG (on when set to anything but "0" or empty).
void set_error_locations(bool on);
bool error_locations();
}  // namespace h3rt

#define H3RT_CHECK(cond, ...)                                                               \
  do {                                                                                      \
    if (!(cond))                                                                            \
      ::h3rt::detail::fail(#cond, __FILE__, __LINE__, ::h3rt::detail::concat(__VA_ARGS__)); \
  } while (0)

#define H3RT_FAIL(...) \
  ::h3rt::detail::fail(nullptr, __FILE__, __LINE__, ::h3rt::detail::concat(__VA_ARGS__))
