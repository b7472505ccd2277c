#include "h3rt/dtype.h"

#include <array>

namespace h3rt {
namespace {

struct DTypeInfo {
  DType type;
  int64_t size;
  const char* name;
  const char* st_name;
};

constexpr std::array<DTypeInfo, 10> kInfo = {{
    {DType::f64, 8, "f64", "F64"},
    {DType::f32, 4, "f32", "F32"},
    {DType::bf16, 2, "bf16", "BF16"},
    {DType::f16, 2, "f16", "F16"},
    {DType::e4m3, 1, "e4m3", "F8_E4M3"},
    {DType::e2m1x2, 1, "e2m1x2", "U8"},
    {DType::u8, 1, "u8", "U8"},
    {DType::i8, 1, "i8", "I8"},
    {DType::i32, 4, "i32", "I32"},
    {DType::i64, 8, "i64", "I64"},
}};

const DTypeInfo& info(DType t) {
  return kInfo[static_cast<size_t>(t)];
}

}  // namespace

int64_t dtype_size(DType t) {
  return info(t).size;
}
const char* dtype_name(DType t) {
  return info(t).name;
}
const char* safetensors_dtype_name(DType t) {
  return info(t).st_name;
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& i : kInfo)
    if (name == i.st_name && i.type != DType::e2m1x2) return i.type;
  return std::nullopt;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kInfo)
    if (name == i.name) return i.type;
  return std::nullopt;
}

}  // namespace h3rt
