// What `sample` and `forward` share: the model and device options, turned into the library's
// ModelSource and DenoiserOptions (h3rt/pipeline.h).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "h3rt/pipeline.h"

namespace h3rt::cli {

// --device-memory-limit SIZE into `size` (parse_memory_size reads it): sample, forward, bench.
void add_device_memory_limit(CLI::App* cmd, std::string& size);
// --weight-stream-source auto|pinned|file into `source` (WeightStreamSource).
void add_weight_stream_source(CLI::App* cmd, std::string& source);

struct ModelOptions {
  std::string preset;      // "tiny" / "h3"; empty: tiny unless a checkpoint is given
  std::string checkpoint;  // a .safetensors file
  std::string qkv_layout = "auto";
  std::string qkv_override;  // a file holding only the qkv tensors, loaded over the checkpoint
  uint64_t weights_seed = 0;
  std::string precision;       // empty: fp32 on the CPU, bf16 on CUDA
  std::string device = "cpu";  // cpu or cuda
  std::string fp8_activations = "static";
  std::string attention = "bf16";  // sample only
  std::string cuda_graph = "on";   // sample only
  std::string gemm = "bf16";       // sample only: a preset's block GEMMs on CUDA
  int int8_group = -1;             // sample only: --gemm int8's convrot group (-1: the preset's)
  std::vector<std::string> loras;  // --lora F[:strength], repeatable
  bool lora_skip_unmatched = false;
  std::string check_finite = "first";
  std::string device_memory_limit = "0";  // --device-memory-limit SIZE (0: none)
  std::string weight_stream_source = "auto";

  // --preset (with_preset), --checkpoint, --qkv-*, --precision, --device, --fp8-activations,
  // --lora, --lora-skip-unmatched, --check-finite, --device-memory-limit,
  // --weight-stream-source.
  void add_to(CLI::App* cmd, bool with_preset);
  std::string precision_name() const;  // as given, else the device's default
  std::string describe() const;        // the source, and --gemm when not bf16
  ModelSource source() const;
  DenoiserOptions denoiser_options() const;  // parses the option words (throws naming them)
  // The model on its device; says on stderr when --fp8-activations dynamic changes nothing,
  // and what the LoRAs merged (a warning per skipped pair).
  std::unique_ptr<Denoiser> create() const;
};

}  // namespace h3rt::cli
