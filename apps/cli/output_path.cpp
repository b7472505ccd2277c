#include "cli/output_path.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "h3rt/check.h"

namespace h3rt::cli {

void check_output_path(const std::string& path, const char* what) {
  if (path == "-") return;
  namespace fs = std::filesystem;
  H3RT_CHECK(!path.empty(), what, ": empty path");
  std::error_code ec;
  H3RT_CHECK(!fs::is_directory(path, ec), what, " ", path, ": is a folder, expected a file path");
  const fs::path parent = fs::path(path).parent_path();
  const fs::path dir = parent.empty() ? fs::path(".") : parent;
  H3RT_CHECK(fs::is_directory(dir, ec), what, " ", path, ": folder ", dir.string(),
             " does not exist");
  H3RT_CHECK(access(dir.c_str(), W_OK) == 0, what, " ", path, ": folder ", dir.string(),
             " is not writable");
}

}  // namespace h3rt::cli
