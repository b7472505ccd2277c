// libFuzzer target: the inputs-file reader of `h3rt forward --inputs` / `sample --inputs`
// (text embeddings, video and audio latents checked against the tiny config) and the text
// embeddings reader of `--text-embeddings`.
#include "fuzz_util.h"
#include "h3rt/pipeline.h"

using namespace h3rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = fuzz::parse_image(data, size);
  if (!f) return 0;
  const H3Config c = H3Config::tiny();
  try {
    int64_t length = 0;
    text_embeddings_from_file(*f, c, &length);
  } catch (const Error&) {
  }
  try {
    request_from_inputs(*f, c);
  } catch (const Error&) {
  }
  return 0;
}
