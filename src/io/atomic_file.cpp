#include "io/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "h3rt/check.h"

namespace h3rt::io {

void write_file_atomically(const std::string& path, const std::function<bool(std::FILE*)>& write) {
  // Unique per process: two writers of one target never share a temporary.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  H3RT_CHECK(f, path, ": cannot create: ", std::strerror(errno));
  bool ok = false;
  try {
    ok = write(f);
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  ok = (std::fclose(f) == 0) && ok;
  const int err = errno;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int why = ok ? errno : err;
    std::remove(tmp.c_str());
    H3RT_FAIL(path, ": write failed: ", std::strerror(why));
  }
}

}  // namespace h3rt::io
