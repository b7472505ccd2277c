// Writing a file so that readers see the old file or the whole new one, never a part: the bytes
// go to a temporary file beside it (same folder, so rename() is atomic), which replaces the
// target only once every byte is written and the file is closed. Any failure removes the
// temporary and throws naming the target; nothing half-written stays behind.
#pragma once

#include <cstdio>
#include <functional>
#include <string>

namespace h3rt::io {

// `write` returns false on a short write. Throws h3rt::Error naming `path`.
void write_file_atomically(const std::string& path, const std::function<bool(std::FILE*)>& write);

}  // namespace h3rt::io
