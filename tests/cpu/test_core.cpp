#include <gtest/gtest.h>

#include <cstdlib>

#include "core/env.h"
#include "h3rt/check.h"
#include "h3rt/memory.h"
#include "h3rt/tensor.h"
#include "ops/int8_linear/int8_fused.h"

namespace h3rt {

// Users get the message alone; the expression, file and line only with error locations on.
TEST(Check, ThrowsTheMessageAndLocationsOnRequest) {
  const bool before = error_locations();
  for (bool on : {false, true}) {
    set_error_locations(on);
    try {
      H3RT_CHECK(1 + 1 == 3, "arithmetic is off by ", 1);
      ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("arithmetic is off by 1", 0), 0u) << m;
      EXPECT_EQ(m.find("1 + 1 == 3") != std::string::npos, on) << m;
      EXPECT_EQ(m.find("test_core.cpp") != std::string::npos, on) << m;
    }
  }
  set_error_locations(before);
}

TEST(Tensor, ViewsShareMemoryAndKeepStrides) {
  Tensor t = Tensor::zeros(DType::f32, {2, 3, 4});
  for (int i = 0; i < 24; ++i) t.ptr<float>()[i] = static_cast<float>(i);
  Tensor s = t.slice(2, 1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(s.strides(), (Shape{12, 4, 1}));
  EXPECT_FALSE(s.is_contiguous());
  std::vector<float> v = s.to_f32();
  ASSERT_EQ(v.size(), 12u);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 2.0f);
  EXPECT_EQ(v[2], 5.0f);
  Tensor r = t.select(0, 1);
  EXPECT_EQ(r.shape(), (Shape{3, 4}));
  EXPECT_EQ(r.to_f32()[0], 12.0f);
  EXPECT_THROW(t.slice(1, 2, 5), Error);
  EXPECT_THROW(s.reshape({12}), Error);
  Tensor c = s.contiguous_copy();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_f32(), v);
}

TEST(Memory, PeakTracksTrackedAllocations) {
  reset_host_peak();
  int64_t base = host_memory_stats().current_bytes;
  {
    FloatVec a(1 << 20);
    EXPECT_EQ(host_memory_stats().current_bytes, base + (4 << 20));
  }
  EXPECT_EQ(host_memory_stats().current_bytes, base);
  EXPECT_GE(host_memory_stats().peak_bytes, base + (4 << 20));
}

// The kernel switches: unset or empty keep the default, 0 / 1 set it, anything else is an
// error naming the variable and the accepted values.
TEST(Core, EnvSwitchAcceptsZeroOneOrUnset) {
  const char* name = "H3RT_TEST_ENV_SWITCH";
  ::unsetenv(name);
  EXPECT_TRUE(env_switch(name, true));
  EXPECT_FALSE(env_switch(name, false));
  ::setenv(name, "", 1);
  EXPECT_TRUE(env_switch(name, true));
  ::setenv(name, "0", 1);
  EXPECT_FALSE(env_switch(name, true));
  ::setenv(name, "1", 1);
  EXPECT_TRUE(env_switch(name, false));
  ::setenv(name, "off", 1);
  try {
    env_switch(name, true);
    ADD_FAILURE() << "off was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("H3RT_TEST_ENV_SWITCH=off"), std::string::npos) << what;
    EXPECT_NE(what.find("expected 0 (off) or 1 (on)"), std::string::npos) << what;
  }
  ::unsetenv(name);
}

// A count switch: unset or empty keep the default; a number in range is taken; anything else
// (not a number, trailing text, out of range) is an error naming the variable and the range.
TEST(Core, EnvCountAcceptsANumberInRangeOrUnset) {
  const char* name = "H3RT_TEST_ENV_COUNT";
  ::unsetenv(name);
  EXPECT_EQ(env_count(name, 8, 1, 64), 8);
  ::setenv(name, "", 1);
  EXPECT_EQ(env_count(name, 8, 1, 64), 8);
  ::setenv(name, "16", 1);
  EXPECT_EQ(env_count(name, 8, 1, 64), 16);
  for (const char* bad : {"0", "65", "8x", "many", "-3"}) {
    ::setenv(name, bad, 1);
    try {
      env_count(name, 8, 1, 64);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("H3RT_TEST_ENV_COUNT=") + bad), std::string::npos) << what;
      EXPECT_NE(what.find("from 1 to 64"), std::string::npos) << what;
    }
  }
  ::unsetenv(name);
}

// H3RT_INT8_ROTATE picks the rotation form where the caller left kAuto, and only there.
TEST(Core, Int8RotateEnvOverridesOnlyAuto) {
  using ops::Int8RotateMath;
  const char* name = "H3RT_INT8_ROTATE";
  ::unsetenv(name);
  EXPECT_EQ(ops::int8_rotate_env(Int8RotateMath::kAuto), Int8RotateMath::kAuto);
  ::setenv(name, "integer", 1);
  EXPECT_EQ(ops::int8_rotate_env(Int8RotateMath::kAuto), Int8RotateMath::kInteger);
  EXPECT_EQ(ops::int8_rotate_env(Int8RotateMath::kDouble), Int8RotateMath::kDouble);
  ::setenv(name, "double", 1);
  EXPECT_EQ(ops::int8_rotate_env(Int8RotateMath::kAuto), Int8RotateMath::kDouble);
  ::setenv(name, "int32", 1);
  try {
    ops::int8_rotate_env(Int8RotateMath::kAuto);
    ADD_FAILURE() << "int32 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("H3RT_INT8_ROTATE=int32: expected double or integer"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv(name);
}

}  // namespace h3rt
