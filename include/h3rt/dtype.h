// Element types of tensors, with their sizes and safetensors names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace h3rt {

enum class DType : uint8_t { f64, f32, bf16, f16, e4m3, e2m1x2, u8, i8, i32, i64 };

// Bytes per element; e2m1x2 is one byte holding two FP4 values.
int64_t dtype_size(DType t);
// Short lower-case name ("bf16", "e4m3", ...), used in messages and reports.
const char* dtype_name(DType t);
// The dtype string safetensors files use ("F32", "BF16", "F8_E4M3", ...). e2m1x2 is stored as U8.
const char* safetensors_dtype_name(DType t);
std::optional<DType> dtype_from_safetensors(std::string_view name);
std::optional<DType> dtype_from_name(std::string_view name);

}  // namespace h3rt
