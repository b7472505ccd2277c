#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "h3rt/safetensors.h"
#include "io/mapped_files.h"
#include "test_util.h"

namespace h3rt {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / "h3rt_tests";
  fs::create_directories(dir);
  return (dir / name).string();
}

// Writes a file from a raw header string and a data section of `data_bytes` bytes.
std::string write_raw(const std::string& name, const std::string& header, size_t data_bytes,
                      uint64_t header_len_override = 0) {
  std::string path = temp_path(name);
  std::ofstream f(path, std::ios::binary);
  uint64_t n = header_len_override ? header_len_override : header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
  f << header << std::string(data_bytes, '\x01');
  return path;
}

// Expects open() to throw and the message to mention the file and `needle`.
void expect_error(const std::string& path, const std::string& needle) {
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << "missing '" << needle << "' in: " << m;
  }
}

TEST(Safetensors, RoundTripKeepsValuesShapesDtypesAndMetadata) {
  Tensor a = tensor_from_f32({1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f}, {2, 3}, DType::f32);
  Tensor b = tensor_from_f32({1.0f, 2.0f, 3.0f, 4.0f}, {4}, DType::bf16);
  Tensor c = Tensor::zeros(DType::i64, {3});
  c.ptr<int64_t>()[2] = -42;
  Tensor strided = a.slice(1, 1, 3);  // non-contiguous: written contiguous
  std::string path = temp_path("roundtrip.safetensors");
  write_safetensors(path, {{"a", a}, {"b", b}, {"c", c}, {"s", strided}}, {{"format", "pt"}});
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.get("a").to_f32(), a.to_f32());
  EXPECT_EQ(f.get("b").dtype(), DType::bf16);
  EXPECT_EQ(f.get("b").to_f32(), b.to_f32());
  EXPECT_EQ(f.get("c").ptr<int64_t>()[2], -42);
  EXPECT_EQ(f.get("s").shape(), (Shape{2, 2}));
  EXPECT_EQ(f.get("s").to_f32(), (std::vector<float>{-2.0f, 3.25f, 7.0f, -0.5f}));
  EXPECT_NO_THROW(f.get("a", DType::f32, {2, 3}));
  EXPECT_THROW(f.get("a", DType::f32, {3, 2}), Error);
  EXPECT_THROW(f.get("missing"), Error);
}

TEST(Safetensors, ViewsOutliveTheFileObject) {
  std::string path = temp_path("outlive.safetensors");
  write_safetensors(path, {{"x", tensor_from_f32({4.0f, 5.0f}, {2})}});
  Tensor t;
  { t = SafetensorsFile::open(path).get("x"); }
  EXPECT_EQ(t.to_f32(), (std::vector<float>{4.0f, 5.0f}));
}

// Views of an open file are mapped file memory (weight streaming keeps them as the file source
// without a copy) for exactly the file's bytes and as long as a view holds the mapping.
TEST(Safetensors, KnowsWhichMemoryIsAMappedFile) {
  std::string path = temp_path("mapped.safetensors");
  write_safetensors(path, {{"x", tensor_from_f32({4.0f, 5.0f, 6.0f}, {3})}});
  Tensor t = SafetensorsFile::open(path).get("x");
  const char* p = static_cast<const char*>(t.data());
  EXPECT_TRUE(is_mapped_file_memory(p, t.nbytes()));
  EXPECT_TRUE(is_mapped_file_memory(p + 4, 8));
  EXPECT_FALSE(is_mapped_file_memory(p, 1 << 20)) << "past the end of the file";
  const Tensor heap = t.contiguous_copy();
  EXPECT_FALSE(is_mapped_file_memory(heap.data(), heap.nbytes()));
  EXPECT_EQ(mapping_of(p + 4), mapping_of(p));
  EXPECT_EQ(mapping_of(heap.data()), nullptr);
  t = Tensor();  // the last view: the file is unmapped
  EXPECT_FALSE(is_mapped_file_memory(p, 4));
}

// A mapped file written in place or truncated is seen (what streaming from it checks before a
// step); a new file renamed over it is not a change: the mapping keeps the old one.
TEST(Safetensors, MappedFileChangesOnDiskAreSeen) {
  namespace fs = std::filesystem;
  const std::string path = temp_path("changing.safetensors");
  const auto write = [](const std::string& f) {
    write_safetensors(f, {{"x", tensor_from_f32(std::vector<float>(1024, 1.0f), {1024})}});
  };
  write(path);
  Tensor t = SafetensorsFile::open(path).get("x");
  EXPECT_EQ(mapped_file_change(t.data()), "");
  EXPECT_EQ(mapped_file_change(&path), "") << "not mapped memory";
  write(path + ".new");
  fs::rename(path + ".new", path);
  EXPECT_EQ(mapped_file_change(t.data()), "") << "replaced by a rename";
  t = SafetensorsFile::open(path).get("x");
  fs::last_write_time(path, fs::last_write_time(path) + std::chrono::seconds(2));
  std::string change = mapped_file_change(t.data());
  EXPECT_NE(change.find(path), std::string::npos) << change;
  EXPECT_NE(change.find("written on disk"), std::string::npos) << change;
  t = SafetensorsFile::open(path).get("x");
  fs::resize_file(path, 100);
  change = mapped_file_change(t.data());
  EXPECT_NE(change.find("changed size on disk since it was loaded ("), std::string::npos) << change;
  EXPECT_NE(change.find(" -> 100 bytes)"), std::string::npos) << change;
}

TEST(Safetensors, RejectsEveryMalformedHeader) {
  expect_error(write_raw("empty.st", "", 0), "not valid JSON");  // 8 bytes, header length 0
  {
    std::string p = temp_path("tiny.st");
    std::ofstream(p, std::ios::binary) << "abc";
    expect_error(p, "shorter than the 8-byte");
  }
  expect_error(write_raw("len.st", "{}", 0, 1000), "does not fit");
  expect_error(write_raw("huge.st", "{}", 0, 1ull << 40), "does not fit");
  expect_error(write_raw("json.st", "{\"a\": [", 0), "not valid JSON");
  expect_error(write_raw("array.st", "[1,2]", 0), "not a JSON object");
  expect_error(write_raw("dtype.st", R"({"t":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})", 1),
               "unsupported dtype");
  expect_error(write_raw("nodtype.st", R"({"t":{"shape":[1],"data_offsets":[0,1]}})", 1),
               "'t': missing dtype");
  expect_error(
      write_raw("negshape.st", R"({"t":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1),
      "non-negative");
  expect_error(write_raw("size.st", R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
               "needs 8");
  expect_error(write_raw("order.st", R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 4),
               "begin > end");
  expect_error(
      write_raw("outside.st", R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
      "outside the data section");
  expect_error(write_raw("overlap.st",
                         R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         12),
               "overlap");
  expect_error(write_raw("meta.st", R"({"__metadata__":{"k":1}})", 0), "__metadata__");
  expect_error(
      write_raw("field.st", R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}})", 1),
      "unknown field");
  expect_error(temp_path("does_not_exist.st"), "cannot open");
  // Found by the fuzz target (UBSan: signed overflow): strides of an empty tensor with huge
  // dimensions, and offsets beyond int64.
  expect_error(write_raw("strides.st",
                         R"({"t":{"dtype":"F32","shape":[0,1099511627776,1099511627776],)"
                         R"("data_offsets":[0,0]}})",
                         0),
               "implausibly large");
  expect_error(write_raw("offsets.st",
                         R"({"t":{"dtype":"U8","shape":[0],)"
                         R"("data_offsets":[9223372036854775808,0]}})",
                         0),
               "below 2^62");
}

// parse() runs the same validation over bytes in memory, naming the given name.
TEST(Safetensors, ParsesImagesInMemory) {
  const std::string path = write_raw("mem.st",
                                     R"({"t":{"dtype":"U8","shape":[3],)"
                                     R"("data_offsets":[0,3]}})",
                                     3);
  std::ifstream in(path, std::ios::binary);
  auto bytes = std::make_shared<std::string>((std::istreambuf_iterator<char>(in)),
                                             std::istreambuf_iterator<char>());
  const SafetensorsFile f = SafetensorsFile::parse("image", bytes, bytes->data(), bytes->size());
  EXPECT_EQ(f.path(), "image");
  EXPECT_EQ(f.get("t").to_f32(), (std::vector<float>{1, 1, 1}));
  try {
    SafetensorsFile::parse("short image", nullptr, bytes->data(), 5);
    ADD_FAILURE() << "parsed 5 bytes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("short image: not a safetensors file"), std::string::npos)
        << e.what();
  }
}

TEST(Safetensors, TruncatedGoldenCheckpointIsAnErrorNotACrash) {
  std::string src = test::golden_dir() + "/weights.safetensors";
  std::ifstream in(src, std::ios::binary);
  ASSERT_TRUE(in) << src;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string path = temp_path("truncated.safetensors");
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  expect_error(path, "outside the data section");
  EXPECT_NO_THROW(SafetensorsFile::open(src));
}

}  // namespace
}  // namespace h3rt
