// The checkpoint files h3rt has mapped (SafetensorsFile::open). Their pages are the kernel's page
// cache, dropped under memory pressure and read again on use, so a view of them costs no host
// memory (weight streaming's file source keeps such views and reads them every step). The file
// stays open while mapped, so a change to it on disk can be seen before it is read again.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace h3rt {

// SafetensorsFile's mapping of `path` at [addr, addr + bytes), through the open `fd` (owned
// from here on: closed by unregister_mapping).
void register_mapping(const void* addr, size_t bytes, int fd, const std::string& path);
void unregister_mapping(const void* addr);

// [p, p + bytes) lies inside one live mapping.
bool is_mapped_file_memory(const void* p, int64_t bytes);

// The first byte of the mapping holding p, or null: one address per file.
const void* mapping_of(const void* p);

// "" when p is in no mapping or its file is as it was mapped; else what changed, naming the
// file: written in place (another modification time) or truncated (another size). A file
// replaced by a rename is unchanged here: the mapping keeps the old one.
std::string mapped_file_change(const void* p);

}  // namespace h3rt
