// The registry of mapped checkpoint files (mapped_files.h).
#include "io/mapped_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <mutex>

#include "h3rt/check.h"

namespace h3rt {
namespace {

struct MappedFile {
  size_t bytes = 0;
  int fd = -1;
  std::string path;
  struct stat at_map {};
};

// Never destroyed: mappings held by static objects are unmapped during exit, in any order.
struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, MappedFile> files;  // by the mapping's first byte
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// The mapping holding p (the registry locked), or null.
const MappedFile* find(Registry& r, const void* p, uintptr_t* begin = nullptr) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = r.files.upper_bound(a);
  if (it == r.files.begin()) return nullptr;
  --it;
  if (a - it->first >= it->second.bytes) return nullptr;
  if (begin) *begin = it->first;
  return &it->second;
}

}  // namespace

void register_mapping(const void* addr, size_t bytes, int fd, const std::string& path) {
  MappedFile f;
  f.bytes = bytes;
  f.fd = fd;
  f.path = path;
  fstat(fd, &f.at_map);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.files[reinterpret_cast<uintptr_t>(addr)] = std::move(f);
}

void unregister_mapping(const void* addr) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.files.find(reinterpret_cast<uintptr_t>(addr));
  if (it == r.files.end()) return;
  ::close(it->second.fd);
  r.files.erase(it);
}

bool is_mapped_file_memory(const void* p, int64_t bytes) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  uintptr_t begin = 0;
  const MappedFile* f = find(r, p, &begin);
  return f && bytes >= 0 &&
         reinterpret_cast<uintptr_t>(p) - begin + static_cast<uint64_t>(bytes) <= f->bytes;
}

const void* mapping_of(const void* p) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  uintptr_t begin = 0;
  return find(r, p, &begin) ? reinterpret_cast<const void*>(begin) : nullptr;
}

std::string mapped_file_change(const void* p) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const MappedFile* f = find(r, p);
  if (!f) return "";
  struct stat now {};
  if (fstat(f->fd, &now) != 0) return f->path + ": cannot be read any more";
  const struct stat& was = f->at_map;
  if (now.st_size != was.st_size)
    return detail::concat(f->path, " changed size on disk since it was loaded (", was.st_size,
                          " -> ", now.st_size, " bytes)");
  if (now.st_mtim.tv_sec != was.st_mtim.tv_sec || now.st_mtim.tv_nsec != was.st_mtim.tv_nsec)
    return f->path + " was written on disk since it was loaded (another modification time)";
  return "";
}

}  // namespace h3rt
