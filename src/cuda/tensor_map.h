// TMA tensor maps on the host (cuTensorMapEncodeTiled through the runtime's driver entry point,
// so nothing links libcuda directly).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace h3rt::cuda {

// A 2-D row-major tensor [rows][cols] of `dtype` with a row pitch of `pitch` bytes, loaded in
// boxes of box_cols x box_rows elements with the given swizzle; out-of-range elements read as
// zero. False when the driver lacks the entry point or rejects the description.
bool make_tensor_map_2d(CUtensorMap* map, CUtensorMapDataType dtype, const void* base,
                        uint64_t cols, uint64_t rows, uint64_t pitch, uint32_t box_cols,
                        uint32_t box_rows, CUtensorMapSwizzle swizzle);

}  // namespace h3rt::cuda
