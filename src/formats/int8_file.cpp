// The `int8-convrot` file transform (the CLI verb is a thin wrapper around it): the host
// reference of h3rt/int8.h applied to tensors of a file, so it can be checked from outside.
#include <cstdlib>
#include <string>

#include "h3rt/int8.h"
#include "h3rt/safetensors.h"

namespace h3rt {

namespace {

Tensor bf16_matrix(const SafetensorsFile& in, const std::string& name, int64_t cols) {
  const Tensor t = in.get(name);
  H3RT_CHECK(t.dtype() == DType::bf16 && t.dim() == 2 && (cols < 0 || t.size(1) == cols), in.path(),
             ": tensor `", name, "` must be bf16 [rows, ", cols < 0 ? "K" : std::to_string(cols),
             "], got ", dtype_name(t.dtype()), " ", shape_str(t.shape()));
  return t;
}

int64_t group_from(const SafetensorsFile& in, int64_t asked) {
  if (asked > 0) return asked;
  auto it = in.metadata().find("group_size");
  if (it == in.metadata().end()) return kConvrotDefaultGroup;
  char* end = nullptr;
  const long long g = std::strtoll(it->second.c_str(), &end, 10);
  H3RT_CHECK(end && *end == '\0' && g > 0, in.path(), ": __metadata__ group_size '", it->second,
             "' is not a positive integer");
  return g;
}

}  // namespace

void int8_convrot_file(const std::string& in_path, const std::string& out_path, int64_t asked) {
  const SafetensorsFile in = SafetensorsFile::open(in_path);
  H3RT_CHECK(in.contains("w"), in_path, ": no tensor `w` (expected bf16 [N, K])");
  const Tensor w = bf16_matrix(in, "w", -1);
  const int64_t n = w.size(0), k = w.size(1), g = group_from(in, asked);
  H3RT_CHECK(convrot_group_valid(g) && k % g == 0, in_path, ": group size ", g,
             " must be a power of 4 dividing K = ", k, " (tensor `w` ", shape_str(w.shape()), ")");
  const Int8Rows wq = int8_quantize_rows(w, g);
  NamedTensors out = {{"wq", wq.q}, {"ws", wq.scale}};
  if (in.contains("x")) {
    const Tensor x = bf16_matrix(in, "x", k);
    Tensor bias;
    if (in.contains("bias")) bias = in.get("bias", DType::bf16, {n});
    const Int8Rows xq = int8_quantize_rows(x, g);
    out.push_back({"xq", xq.q});
    out.push_back({"xs", xq.scale});
    out.push_back({"y", int8_linear(xq, wq.q, wq.scale, in.contains("bias") ? &bias : nullptr)});
  }
  write_safetensors(out_path, out, {{"format", "int8_convrot"}, {"group_size", std::to_string(g)}});
}

}  // namespace h3rt
