// Device runtime: error macro, arch-list dispatch, arena accounting, tensors, streams.
#include <gtest/gtest.h>

#include <string>

#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "cuda_test_util.h"
#include "h3rt/memory.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"

namespace h3rt {
namespace {

using cuda::compiled_arch_supports;

// The CUDA error's name, text and the failing call always; the source file only with error
// locations on (H3RT_DEBUG=1, h3rt --verbose).
TEST(CudaRuntime, CheckMacroThrowsWithNameExpressionAndLocation) {
  const bool before = error_locations();
  for (bool on : {false, true}) {
    set_error_locations(on);
    try {
      H3RT_CUDA_CHECK(cudaErrorInvalidValue);
      ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("cudaErrorInvalidValue"), std::string::npos) << m;
      EXPECT_NE(m.find("invalid argument"), std::string::npos) << m;
      EXPECT_EQ(m.find("test_runtime.cu") != std::string::npos, on) << m;
    }
  }
  set_error_locations(before);
}

// Why no GPU is usable, in each form a user can meet (no GPU test: pure text).
TEST(CudaRuntime, DeviceUnavailableText) {
  EXPECT_EQ(cuda::device_unavailable_text(cudaSuccess, 1, 13000, 13000), "");
  const std::string none = "no CUDA device is available (";
  EXPECT_EQ(cuda::device_unavailable_text(cudaErrorInsufficientDriver, 0, 12040, 13000),
            none +
                "the NVIDIA driver supports CUDA 12.4, older than the CUDA 13.0 runtime this "
                "build uses: update the driver)");
  EXPECT_EQ(cuda::device_unavailable_text(cudaErrorInsufficientDriver, 0, 0, 13000),
            none + "no NVIDIA driver was found)");
  for (cudaError_t e : {cudaErrorNoDevice, cudaSuccess})
    EXPECT_EQ(cuda::device_unavailable_text(e, 0, 13000, 13000),
              none + "the NVIDIA driver lists no GPU; see nvidia-smi and CUDA_VISIBLE_DEVICES)");
  const std::string other =
      cuda::device_unavailable_text(cudaErrorDevicesUnavailable, 0, 13000, 13000);
  EXPECT_EQ(other.rfind(none + "cudaErrorDevicesUnavailable: ", 0), 0u) << other;
}

TEST(CudaRuntime, ArchListParsing) {
  const std::string list = "90a,121a";
  EXPECT_EQ(compiled_arch_supports(9, 0, list), 90);
  EXPECT_EQ(compiled_arch_supports(12, 1, list), 121);
  EXPECT_EQ(compiled_arch_supports(12, 0, list), 0);  // "a" code runs on its exact cc only
  EXPECT_EQ(compiled_arch_supports(10, 0, list), 0);
  EXPECT_EQ(compiled_arch_supports(8, 6, "80;90a"), 80);  // plain SASS: same major, >= minor
  EXPECT_EQ(compiled_arch_supports(8, 0, "86"), 0);
  EXPECT_EQ(compiled_arch_supports(10, 3, "100f,120a"), 100);  // family code
  EXPECT_EQ(compiled_arch_supports(12, 1, "120f,121a"), 121);  // exact match preferred
  EXPECT_EQ(compiled_arch_supports(9, 0, ""), 0);
  EXPECT_EQ(compiled_arch_supports(9, 0, "native"), 0);
  EXPECT_EQ(compiled_arch_supports(9, 0), compiled_arch_supports(9, 0, H3RT_CUDA_ARCH_LIST));
}

// The error a CUDA model gives on a GPU the build has no code for (no GPU needed).
TEST(CudaRuntime, ArchSupportErrorNamesBuildDeviceAndRebuild) {
  EXPECT_EQ(cuda::arch_support_error(90, "H100", "90a,121a"), "");
  EXPECT_EQ(cuda::arch_support_error(121, "GB10", "90a,121a"), "");
  const std::string e = cuda::arch_support_error(120, "RTX 5090", "90a,121a");
  for (const char* want : {"'90a,121a'", "RTX 5090 (sm_120)", "-DH3RT_CUDA_ARCHS=120a"})
    EXPECT_NE(e.find(want), std::string::npos) << want << " not in: " << e;
  EXPECT_NE(cuda::arch_support_error(89, "RTX 4090", "90a").find("-DH3RT_CUDA_ARCHS=89 "),
            std::string::npos);
}

TEST(CudaRuntime, LauncherRejectsBadShapesBeforeTouchingTheDevice) {
  ops::RmsNormModulateCudaParams p;
  p.x = reinterpret_cast<__nv_bfloat16*>(uintptr_t(256));
  p.y = p.x;
  p.rows = 4;
  p.dim = 100;  // not a multiple of 8
  EXPECT_THROW(ops::rmsnorm_modulate_cuda(p, nullptr), Error);
}

TEST(CudaRuntime, DeviceArenaReusesBucketsAndCounts) {
  H3RT_REQUIRE_GPU();
  cuda::DeviceArena arena;
  EXPECT_EQ(cuda::DeviceArena::bucket_size(1000), 1024u);
  EXPECT_EQ(cuda::DeviceArena::bucket_size(3 << 20), size_t(4) << 20);
  void* a = arena.allocate(1000);
  ASSERT_NE(a, nullptr);
  auto s = arena.stats();
  EXPECT_EQ(s.current_allocated, 1024);
  EXPECT_EQ(s.cuda_malloc_calls, 1);
  arena.free(a);
  void* b = arena.allocate(1024);  // same bucket: the cached block comes back
  EXPECT_EQ(a, b);
  EXPECT_EQ(arena.stats().cuda_malloc_calls, 1);
  void* c = arena.allocate(3 << 20);
  s = arena.stats();
  EXPECT_EQ(s.current_allocated, 1024 + (4 << 20));
  EXPECT_EQ(s.peak_allocated, s.current_allocated);
  EXPECT_EQ(s.current_reserved, 1024 + (4 << 20));
  arena.free(c);
  arena.free(b);
  s = arena.stats();
  EXPECT_EQ(s.current_allocated, 0);
  EXPECT_EQ(s.peak_allocated, 1024 + (4 << 20));
  EXPECT_EQ(s.current_reserved, 1024 + (4 << 20));
  arena.release_cached();
  s = arena.stats();
  EXPECT_EQ(s.current_reserved, 0);
  EXPECT_EQ(s.peak_reserved, 1024 + (4 << 20));
  arena.reset_peak();
  EXPECT_EQ(arena.stats().peak_allocated, 0);
}

// More than any GPU holds: OutOfMemory naming the scope, the size, the arena's use and peak, the
// GPU's free memory and what needs less; the arena stays usable.
TEST(CudaRuntime, DeviceOutOfMemoryNamesTheAllocation) {
  H3RT_REQUIRE_GPU();
  cuda::DeviceArena arena;
  void* a = arena.allocate(1000);
  try {
    const MemoryScope scope("the weights of layer blocks.7.mlp.fc1");
    arena.allocate(size_t(1) << 50);  // 1 PiB
    ADD_FAILURE() << "allocated 1 PiB";
  } catch (const OutOfMemory& e) {
    const std::string m = e.what();
    for (const char* part :
         {"out of device memory allocating 1048576.00 GiB for the weights of "
          "layer blocks.7.mlp.fc1",
          "the arena holds 1024 B in use (peak 1024 B)", "reserved from the driver", "the GPU has ",
          "--device-memory-limit auto", "quantize-checkpoint", "--frames"})
      EXPECT_NE(m.find(part), std::string::npos) << "'" << part << "' missing in: " << m;
  }
  EXPECT_EQ(memory_scope(), "");
  arena.free(a);
  void* b = arena.allocate(1000);
  EXPECT_NE(b, nullptr);
  arena.free(b);
}

TEST(CudaRuntime, DeviceTensorReturnsItsBlockAndRoundTrips) {
  H3RT_REQUIRE_GPU();
  cuda::DeviceArena arena;
  {
    Tensor host = tensor_from_f32({1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f}, {2, 3}, DType::bf16);
    cuda::Stream stream;
    H3RT_NVTX_RANGE("test.roundtrip");
    Tensor dev = cuda::to_device(host, stream, arena);
    EXPECT_EQ(dev.device(), Device::cuda);
    EXPECT_EQ(dev.shape(), Shape({2, 3}));
    EXPECT_EQ(arena.stats().current_allocated, 512);
    Tensor back = cuda::to_host(dev, stream);
    EXPECT_EQ(back.to_f32(), host.to_f32());
  }
  EXPECT_EQ(arena.stats().current_allocated, 0);
  EXPECT_EQ(arena.stats().current_reserved, 512);
}

TEST(CudaRuntime, DeviceIsUsable) {
  H3RT_REQUIRE_GPU();
  const int cc = cuda::current_device_cc();
  EXPECT_GE(cc, 80);
  EXPECT_NE(compiled_arch_supports(cc / 10, cc % 10), 0)
      << "this build's arch list " << H3RT_CUDA_ARCH_LIST << " has no code for sm_" << cc;
}

}  // namespace
}  // namespace h3rt
