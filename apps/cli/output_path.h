// Early checks of the files a verb will write, so a long run does not end in "cannot create".
#pragma once

#include <string>

namespace h3rt::cli {

// Throws (H3RT_CHECK) unless `path`'s folder exists and is writable and `path` is not itself a
// folder. `what` names the option in the message (e.g. "--out"). "-" (stdout) always passes.
void check_output_path(const std::string& path, const char* what);

}  // namespace h3rt::cli
