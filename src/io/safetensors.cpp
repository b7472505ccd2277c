#include "h3rt/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/mapped_files.h"

namespace h3rt {
namespace {

using json = nlohmann::json;

// The header may not exceed 100 MB (the format's own limit), so a corrupted length fails fast.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (!addr || !size) return;
    unregister_mapping(addr);  // closes the file
    munmap(addr, size);
  }
};

std::shared_ptr<Mapping> map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  H3RT_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    H3RT_FAIL(path, ": not a regular file");
  }
  auto m = std::make_shared<Mapping>();
  m->size = static_cast<size_t>(st.st_size);
  if (m->size > 0) {
    m->addr = mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m->addr == MAP_FAILED) {
      m->addr = nullptr;
      ::close(fd);
      H3RT_FAIL(path, ": cannot map file: ", std::strerror(errno));
    }
    register_mapping(m->addr, m->size, fd, path);  // keeps fd open while mapped
    return m;
  }
  ::close(fd);
  return m;
}

SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const json& v) {
  auto bad = [&](const std::string& why) -> Error {
    return Error(path + ": tensor '" + name + "': " + why);
  };
  if (!v.is_object()) throw bad("header entry is not an object");
  for (auto& [k, _] : v.items())
    if (k != "dtype" && k != "shape" && k != "data_offsets") throw bad("unknown field '" + k + "'");
  if (!v.contains("dtype") || !v["dtype"].is_string()) throw bad("missing dtype");
  if (!v.contains("shape") || !v["shape"].is_array()) throw bad("missing shape");
  if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
    throw bad("data_offsets must be [begin, end]");
  SafetensorsEntry e;
  e.name = name;
  std::string dt = v["dtype"].get<std::string>();
  auto dtype = dtype_from_safetensors(dt);
  if (!dtype) throw bad("unsupported dtype '" + dt + "'");
  e.dtype = *dtype;
  // The product of the non-zero dimensions is bounded too: a [0, 2^40, 2^40] tensor holds
  // nothing, but its strides would overflow.
  int64_t numel = 1, span = 1;
  for (const auto& d : v["shape"]) {
    if (!d.is_number_unsigned()) throw bad("shape entries must be non-negative integers");
    uint64_t n = d.get<uint64_t>();
    if (n > (1ull << 48) || static_cast<uint64_t>(span) > (1ull << 50) / (n + 1))
      throw bad("shape is implausibly large");
    e.shape.push_back(static_cast<int64_t>(n));
    numel *= static_cast<int64_t>(n);
    span *= std::max<int64_t>(1, static_cast<int64_t>(n));
  }
  for (const auto& o : v["data_offsets"])
    if (!o.is_number_unsigned() || o.get<uint64_t>() > (1ull << 62))
      throw bad("data_offsets must be non-negative integers below 2^62");
  e.begin = static_cast<int64_t>(v["data_offsets"][0].get<uint64_t>());
  e.end = static_cast<int64_t>(v["data_offsets"][1].get<uint64_t>());
  if (e.begin > e.end) throw bad("data_offsets begin > end");
  int64_t expect = numel * dtype_size(e.dtype);
  if (e.end - e.begin != expect)
    throw bad("byte range [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") holds " +
              std::to_string(e.end - e.begin) + " bytes but shape " + shape_str(e.shape) + " of " +
              dt + " needs " + std::to_string(expect));
  return e;
}

void check_ranges(const std::string& path, std::vector<SafetensorsEntry> sorted,
                  int64_t data_bytes) {
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.begin < b.begin; });
  const SafetensorsEntry* prev = nullptr;
  for (const auto& e : sorted) {
    H3RT_CHECK(e.end <= data_bytes, path, ": tensor '", e.name, "': byte range [", e.begin, ", ",
               e.end, ") lies outside the data section of ", data_bytes,
               " bytes (truncated file?)");
    if (prev && e.begin < prev->end && e.end > e.begin && prev->end > prev->begin)
      H3RT_FAIL(path, ": tensors '", prev->name, "' and '", e.name, "' overlap");
    if (e.end > e.begin) prev = &e;
  }
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto m = map_file(path);
  return parse(path, m, m->addr, m->size);
}

SafetensorsFile SafetensorsFile::parse(const std::string& path, std::shared_ptr<void> owner,
                                       const void* image, size_t size) {
  H3RT_CHECK(size >= 8, path, ": not a safetensors file (", size,
             " bytes, shorter than the 8-byte header length)");
  const auto* bytes = static_cast<const unsigned char*>(image);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];  // little-endian
  H3RT_CHECK(n <= kMaxHeaderBytes && n <= size - 8, path, ": header length ", n,
             " does not fit in a file of ", size, " bytes (truncated or not safetensors)");
  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(bytes) + 8,
                         reinterpret_cast<const char*>(bytes) + 8 + n);
  } catch (const json::exception& e) {
    H3RT_FAIL(path, ": header is not valid JSON: ", e.what());
  }
  H3RT_CHECK(header.is_object(), path, ": header is not a JSON object");

  SafetensorsFile f;
  f.path_ = path;
  f.data_ = reinterpret_cast<const char*>(bytes) + 8 + n;
  f.mapping_ = std::move(owner);
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      H3RT_CHECK(v.is_object(), path, ": __metadata__ is not an object");
      for (auto& [k, mv] : v.items()) {
        H3RT_CHECK(mv.is_string(), path, ": __metadata__ value '", k, "' is not a string");
        f.metadata_[k] = mv.get<std::string>();
      }
      continue;
    }
    f.entries_.push_back(parse_entry(path, name, v));
  }
  // nlohmann::json orders object keys alphabetically; entries_ keeps that (stable) order.
  check_ranges(path, f.entries_, static_cast<int64_t>(size - 8 - n));
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

bool SafetensorsFile::contains(const std::string& name) const {
  return find(name) != nullptr;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  H3RT_CHECK(e, path_, ": no tensor named '", name, "'");
  // Shared ownership of the mapping keeps every view valid after the file object is gone.
  void* p = const_cast<char*>(data_ + e->begin);
  return Tensor(p, e->dtype, e->shape, mapping_);
}

Tensor SafetensorsFile::get(const std::string& name, DType dtype, const Shape& shape) const {
  const SafetensorsEntry* e = find(name);
  H3RT_CHECK(e, path_, ": no tensor named '", name, "' (expected ", dtype_name(dtype), " ",
             shape_str(shape), ")");
  H3RT_CHECK(e->dtype == dtype && e->shape == shape, path_, ": tensor '", name, "' is ",
             dtype_name(e->dtype), " ", shape_str(e->shape), ", expected ", dtype_name(dtype), " ",
             shape_str(shape));
  return get(name);
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  std::vector<Tensor> contiguous;
  for (const auto& [name, t] : tensors) {
    H3RT_CHECK(t.device() == Device::cpu, path, ": tensor '", name, "' is not on the host");
    H3RT_CHECK(!header.contains(name), path, ": tensor '", name, "' given twice");
    contiguous.push_back(t.is_contiguous() ? t : t.contiguous_copy());
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned
  io::write_file_atomically(path, [&](std::FILE* f) {
    uint64_t n = h.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(h.data(), 1, n, f) == n;
    for (const auto& t : contiguous)
      ok = ok && std::fwrite(t.data(), 1, static_cast<size_t>(t.nbytes()), f) ==
                     static_cast<size_t>(t.nbytes());
    return ok;
  });
}

}  // namespace h3rt
