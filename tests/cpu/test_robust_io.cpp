// Out-of-memory errors that name what was being allocated, and atomic output files: a failed
// write leaves the old file and no temporary behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "h3rt/memory.h"
#include "h3rt/report.h"
#include "h3rt/safetensors.h"
#include "io/atomic_file.h"
#include "test_util.h"

namespace h3rt {
namespace {

namespace fs = std::filesystem;

TEST(Memory, ScopesNestAndNameTheAllocationThatFailed) {
  EXPECT_EQ(memory_scope(), "");
  {
    const MemoryScope a("the weights of x.safetensors");
    const MemoryScope b("layer blocks.3.mlp.fc1");
    EXPECT_EQ(memory_scope(), "the weights of x.safetensors / layer blocks.3.mlp.fc1");
    try {
      host_alloc((size_t(1) << 62) + 1);  // more than any machine: refused before asking
      ADD_FAILURE() << "allocated";
    } catch (const OutOfMemory& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("out of host memory allocating 4294967296.00 GiB for the weights of "
                       "x.safetensors / layer blocks.3.mlp.fc1"),
                std::string::npos)
          << m;
      EXPECT_NE(m.find("in use"), std::string::npos) << m;
      EXPECT_NE(m.find("peak"), std::string::npos) << m;
      EXPECT_NE(m.find("--frames"), std::string::npos) << m;
    }
  }
  EXPECT_EQ(memory_scope(), "");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3 << 20), "3.0 MiB");
  EXPECT_EQ(format_bytes(int64_t(3) << 29), "1.50 GiB");
}

std::string read(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

int files_in(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

TEST(AtomicFiles, FailedWritesKeepTheOldFileAndLeaveNoTemporary) {
  const test::TempDir dir("h3rt_atomic");
  const std::string target = dir.file("out.json");
  io::write_file_atomically(target, [](std::FILE* f) { return std::fputs("old", f) >= 0; });
  EXPECT_EQ(read(target), "old");
  EXPECT_THROW(io::write_file_atomically(target,
                                         [](std::FILE* f) {
                                           std::fputs("half", f);
                                           return false;  // a short write
                                         }),
               Error);
  EXPECT_THROW(io::write_file_atomically(target,
                                         [](std::FILE* f) -> bool {
                                           std::fputs("half", f);
                                           throw std::runtime_error("interrupted");
                                         }),
               std::runtime_error);
  EXPECT_EQ(read(target), "old");
  EXPECT_EQ(files_in(dir.file("")), 1) << "a temporary was left behind";
  try {
    io::write_file_atomically(dir.file("no_such_folder/x"), [](std::FILE*) { return true; });
    ADD_FAILURE() << "wrote into a missing folder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_folder/x: cannot create"), std::string::npos)
        << e.what();
  }
}

TEST(AtomicFiles, EveryWriterReplacesWholeFiles) {
  const test::TempDir dir("h3rt_atomic");
  const std::string st = dir.file("t.safetensors"), js = dir.file("r.json");
  write_safetensors(st, {{"a", tensor_from_f32({1, 2, 3}, {3})}});
  write_safetensors(st, {{"b", tensor_from_f32({4}, {1})}});
  EXPECT_TRUE(SafetensorsFile::open(st).contains("b"));
  EXPECT_FALSE(SafetensorsFile::open(st).contains("a"));
  write_json(js, nlohmann::json{{"x", 1}});
  EXPECT_EQ(nlohmann::json::parse(read(js))["x"], 1);
  // A tensor the writer refuses (device memory is impossible here: a duplicate name) fails
  // before anything is written.
  EXPECT_THROW(
      write_safetensors(st, {{"c", tensor_from_f32({1}, {1})}, {"c", tensor_from_f32({2}, {1})}}),
      Error);
  EXPECT_TRUE(SafetensorsFile::open(st).contains("b"));
  EXPECT_EQ(files_in(dir.file("")), 2);
}

}  // namespace
}  // namespace h3rt
