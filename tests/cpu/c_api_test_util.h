// Helpers shared by the C API tests.
#pragma once

#include <cstdint>

#include "h3rt/h3rt.h"
#include "h3rt/memory.h"

namespace h3rt::test {

// h3rt_sample of `req` into buffers of the default request's size (video [1, 24, 7, 8, 12], audio
// [2, 32, 37]: CApi.SampleGivesTheCppBitsAndCancels checks those shapes).
struct CSample {
  h3rt_status status;
  FloatVec video, audio;
};
inline CSample run_c_sample(h3rt_model* m, const h3rt_sample_request& req) {
  CSample c{H3RT_OK, FloatVec(24 * 7 * 8 * 12), FloatVec(2 * 32 * 37)};
  c.status = h3rt_sample(m, &req, c.video.data(), static_cast<int64_t>(c.video.size()),
                         c.audio.data(), static_cast<int64_t>(c.audio.size()));
  return c;
}

}  // namespace h3rt::test
