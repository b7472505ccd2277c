// Weight streaming (DenoiserOptions::device_memory_limit): the size parser, the slot layout of
// a block in each format, the model's weight bytes and the plan (resident / stream / too small)
// on the tiny and the release shapes.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>

#include "h3rt/nvfp4.h"
#include "h3rt/pipeline.h"
#include "h3rt/safetensors.h"
#include "model/weight_stream_plan.h"
#include "model/weights.h"
#include "test_util.h"

namespace h3rt {
namespace {

using model::LinearStorage;
using test::error_of;

TEST(WeightStreamPlan, ParsesSizesInBothUnitSystems) {
  EXPECT_EQ(parse_memory_size("24GB"), 24000000000);
  EXPECT_EQ(parse_memory_size("24gb"), 24000000000);
  EXPECT_EQ(parse_memory_size("24GiB"), int64_t(24) << 30);
  EXPECT_EQ(parse_memory_size("2.5e10"), 25000000000);
  EXPECT_EQ(parse_memory_size("512MiB"), int64_t(512) << 20);
  EXPECT_EQ(parse_memory_size("1.5TB"), 1500000000000);
  EXPECT_EQ(parse_memory_size("4096B"), 4096);
  EXPECT_EQ(parse_memory_size("0"), 0);
  EXPECT_EQ(parse_memory_size("auto"), kDeviceMemoryAuto);
}

// "auto": the free memory less max(1.5 GiB, 5% of the card), never below one byte.
TEST(WeightStreamPlan, AutoLimitLeavesAReserve) {
  const int64_t GiB = int64_t(1) << 30;
  EXPECT_EQ(auto_device_memory_limit(80 * GiB, 80 * GiB), 76 * GiB);
  EXPECT_EQ(auto_device_memory_limit(20 * GiB, 24 * GiB), 20 * GiB - 3 * GiB / 2);
  EXPECT_EQ(auto_device_memory_limit(GiB, 24 * GiB), 1);
  EXPECT_EQ(resolve_device_memory_limit(24 * GiB), 24 * GiB);
  EXPECT_EQ(resolve_device_memory_limit(0), 0);
}

// On the CPU "auto" means no limit (a front end's default works there); a CUDA model resolves it
// from its GPU (CApiV5Cuda, AutoDeviceMemoryLimit*).
TEST(WeightStreamPlan, AutoLimitOnTheCpuIsNone) {
  ModelSource s;
  DenoiserOptions o;
  o.device_memory_limit = kDeviceMemoryAuto;
  auto d = Denoiser::create(s, o);
  EXPECT_EQ(d->weight_streaming().limit, 0);
  EXPECT_FALSE(d->weight_streaming().streamed);
  o.device_memory_limit = -2;
  EXPECT_NE(error_of([&] { Denoiser::create(s, o); }).find("device_memory_limit must be >= 0"),
            std::string::npos);
}

TEST(WeightStreamPlan, RejectsMalformedSizesNamingTheOption) {
  for (const char* bad : {"", "GB", "24 GB", "24XB", "-1GB", "abc", "1e30GB", " 24GB"}) {
    const std::string e = error_of([&] { parse_memory_size(bad, "--device-memory-limit"); });
    EXPECT_NE(e.find("--device-memory-limit"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find(std::string("'") + bad + "'"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("or auto"), std::string::npos) << bad << ": " << e;
  }
}

TEST(WeightStreamPlan, SlotEntriesAre256ByteAligned) {
  model::SlotLayout l;
  l.add("a", 10);
  l.add("b", 256);
  l.add("c", 1);
  ASSERT_EQ(l.entries.size(), 3u);
  EXPECT_EQ(l.entries[0].offset, 0);
  EXPECT_EQ(l.entries[1].offset, 256);
  EXPECT_EQ(l.entries[2].offset, 512);
  EXPECT_EQ(l.bytes, 768);
}

TEST(WeightStreamPlan, TinyBf16BlockStreamsItsFiveMatrices) {
  const H3Config c = H3Config::tiny();  // H 192, I 256, F 384, Tm 96
  const model::SlotLayout l =
      model::block_slot_layout(c, model::uniform_storage(c, LinearStorage::bf16));
  ASSERT_EQ(l.entries.size(), 5u);
  const char* names[] = {"qkv.weight", "out.weight", "fc1.weight", "fc2.weight", "adaln.weight"};
  const int64_t bytes[] = {768 * 192 * 2, 192 * 256 * 2, 768 * 192 * 2, 192 * 384 * 2,
                           18 * 192 * 96 * 2};
  int64_t total = 0;
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(l.entries[k].name, names[k]);
    EXPECT_EQ(l.entries[k].bytes, bytes[k]);
    EXPECT_EQ(l.entries[k].offset, total);  // every size here is a multiple of 256
    total += bytes[k];
  }
  EXPECT_EQ(l.bytes, total);
}

TEST(WeightStreamPlan, Nvfp4BlocksStreamTheirBlockScalesToo) {
  const H3Config c = H3Config::tiny();
  const model::SlotLayout l =
      model::block_slot_layout(c, model::uniform_storage(c, LinearStorage::nvfp4));
  ASSERT_EQ(l.entries.size(), 9u);  // 4 x (codes, scales) + the bf16 AdaLN
  EXPECT_EQ(l.entries[0].bytes, 768 * 192 / 2);
  EXPECT_EQ(l.entries[1].name, "qkv.weight_scale");
  EXPECT_EQ(l.entries[1].bytes, nvfp4_scales_bytes(768, 192));
  EXPECT_EQ(l.entries[8].name, "adaln.weight");
}

TEST(WeightStreamPlan, ReleaseInt8BlockSizes) {
  const H3Config c = H3Config::h3();
  const int64_t projections = (3 * 7168 + 7168 + 2 * 14336 + 14336) * int64_t(5376);
  EXPECT_EQ(projections, 385351680);  // 0.385 GB per block in int8 (the header's estimate)
  const model::SlotLayout full =
      model::block_slot_layout(c, model::uniform_storage(c, LinearStorage::int8));
  EXPECT_EQ(full.bytes, projections + 18 * 5376 * int64_t(2688) * 2);  // + the bf16 AdaLN
  H3Config pruned = c;
  pruned.adaln_curve_grid = 64;
  pruned.adaln_curve_rank = 8;
  const model::BlockStorage s = model::uniform_storage(pruned, LinearStorage::int8);
  EXPECT_EQ(s.adaln, LinearStorage::f32);
  EXPECT_EQ(model::block_slot_layout(pruned, s).bytes, projections + 18 * 5376 * 8 * 4);
}

TEST(WeightStreamPlan, Bf16ModelBytesAgreeWithTheParameterEstimate) {
  const H3Config c = H3Config::h3();
  const int64_t ours = model::model_weight_bytes(c, model::uniform_storage(c, LinearStorage::bf16));
  // estimate_weight_bytes also counts the time embedder (host-side on CUDA) and stores the
  // patch projections and heads alike: within 1%.
  const double theirs = static_cast<double>(estimate_weight_bytes(c).stored_bytes);
  EXPECT_NEAR(ours / theirs, 1.0, 0.01) << ours << " vs " << theirs;
}

// 1000 bytes of weights, 800 of them in 8 block images of 100; 500 bytes of activations.
model::WeightStreamInput eight_blocks() {
  model::WeightStreamInput in;
  in.weight_bytes = 1000;
  in.slot_bytes = 100;
  in.blocks = 8;
  in.working_set_bytes = 500;
  return in;
}

TEST(WeightStreamPlan, NoLimitOrRoomKeepsWeightsResident) {
  model::WeightStreamInput in = eight_blocks();
  model::WeightStreamPlan p = model::plan_weight_streaming(in);
  EXPECT_FALSE(p.stream);
  EXPECT_EQ(p.device_bytes, 1500);
  in.limit = 1500;
  p = model::plan_weight_streaming(in);
  EXPECT_FALSE(p.stream);
  EXPECT_EQ(p.resident_weight_bytes, 1000);
  EXPECT_EQ(p.h2d_bytes_per_step, 0);
}

// Over the limit the fewest blocks stream that bring the device bytes within it: each block
// beyond the two slots saves its 100 bytes. They are spread over the model.
TEST(WeightStreamPlan, OverTheLimitStreamsTheFewestBlocksNeeded) {
  model::WeightStreamInput in = eight_blocks();
  in.limit = 1499;  // 1 byte over: 3 blocks
  model::WeightStreamPlan p = model::plan_weight_streaming(in);
  EXPECT_TRUE(p.stream);
  EXPECT_EQ(p.blocks, (std::vector<int64_t>{1, 4, 6}));
  EXPECT_EQ(p.slots, 2);
  EXPECT_EQ(p.slot_bytes, 100);
  EXPECT_EQ(p.resident_weight_bytes, 700);
  EXPECT_EQ(p.host_bytes, 300);
  EXPECT_EQ(p.h2d_bytes_per_step, 300);
  EXPECT_EQ(p.device_bytes, 700 + 2 * 100 + 500);
  EXPECT_EQ(model::weight_streaming_of(p, in.limit).streamed_blocks, 3);
  in.limit = 1100;  // 400 over: 6 blocks
  EXPECT_EQ(model::plan_weight_streaming(in).blocks, (std::vector<int64_t>{0, 2, 3, 4, 6, 7}));
  EXPECT_EQ(model::plan_weight_streaming(in).device_bytes, 1100);
  in.limit = 900;  // every block
  EXPECT_EQ(model::plan_weight_streaming(in).blocks.size(), 8u);
  // A streamed model keeps its streamed blocks without a limit, and adds to them over one.
  in.limit = 0;
  in.streamed = {1, 4, 6};
  EXPECT_EQ(model::plan_weight_streaming(in).blocks, in.streamed);
  in.limit = 1100;
  p = model::plan_weight_streaming(in);
  EXPECT_EQ(p.blocks, (std::vector<int64_t>{0, 1, 3, 4, 6, 7}));  // 1, 4 and 6 among them
  EXPECT_EQ(p.h2d_bytes_per_step, 600);
}

// Blocks of the caller's CUDA tensors stay resident; the others stream in their place, and a
// limit only they could meet is refused, saying why.
TEST(WeightStreamPlan, TheCallersBlocksStayResident) {
  model::WeightStreamInput in = eight_blocks();
  in.fixed = {0, 1, 2, 3};
  in.limit = 1300;  // 4 blocks
  EXPECT_EQ(model::plan_weight_streaming(in).blocks, (std::vector<int64_t>{4, 5, 6, 7}));
  in.limit = 1299;
  const std::string e = error_of([&] { model::plan_weight_streaming(in); });
  EXPECT_NE(e.find("(1300 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("4 blocks are the caller's CUDA tensors"), std::string::npos) << e;
  EXPECT_NE(error_of([] { model::spread_blocks(4, 1, {}, {7}); }).find("out of range"),
            std::string::npos);
  EXPECT_EQ(model::spread_blocks(5, 5, {2}, {}), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(model::spread_blocks(50, 1, {}, {}), (std::vector<int64_t>{25}));
}

// The source (WeightStreamSource): automatic pins while every block's copy fits the available
// memory less 10% of the total and 2 GiB; file pins only the slots' staging images.
TEST(WeightStreamPlan, SourceChoiceAndTheFileSourcesPinnedBytes) {
  using S = WeightStreamSource;
  const int64_t G = int64_t(1) << 30;
  const model::HostMemory host{40 * G, 64 * G};  // margin 6.4 + 2 GiB: room for 31.6 GiB
  const int64_t room = 40 * G - 64 * G / 10 - 2 * G;
  EXPECT_EQ(model::choose_stream_source(S::automatic, room, host), S::pinned);
  EXPECT_EQ(model::choose_stream_source(S::automatic, room + 1, host), S::file);
  EXPECT_EQ(model::choose_stream_source(S::pinned, 100 * G, host), S::pinned);  // as asked
  EXPECT_EQ(model::choose_stream_source(S::file, 1, host), S::file);
  EXPECT_EQ(model::choose_stream_source(S::automatic, 1, model::HostMemory{G, 64 * G}), S::file);

  model::WeightStreamInput in = eight_blocks();
  in.limit = 1499;
  const model::WeightStreamPlan p = model::plan_weight_streaming(in);
  EXPECT_EQ(model::with_source(p, S::pinned).host_bytes, 300);
  const model::WeightStreamPlan f = model::with_source(p, S::file);
  EXPECT_EQ(f.source, S::file);
  EXPECT_EQ(f.host_bytes, 2 * 100);
  EXPECT_EQ(f.h2d_bytes_per_step, 300);
  EXPECT_EQ(f.device_bytes, p.device_bytes);
  const WeightStreaming w = model::weight_streaming_of(f, in.limit);
  EXPECT_EQ(w.source, "file");
  EXPECT_EQ(to_json(w).at("source"), "file");
  EXPECT_EQ(model::weight_streaming_of(model::plan_weight_streaming(eight_blocks()), 0).source, "");
  EXPECT_NE(error_of([&] { model::with_source(p, S::automatic); }).find("choose"),
            std::string::npos);
}

TEST(WeightStreamPlan, SourceWordsAndTheHostsMemory) {
  for (WeightStreamSource s :
       {WeightStreamSource::automatic, WeightStreamSource::pinned, WeightStreamSource::file})
    EXPECT_EQ(parse_weight_stream_source(weight_stream_source_name(s)), s);
  const std::string e =
      error_of([] { parse_weight_stream_source("mmap", "--weight-stream-source"); });
  EXPECT_NE(e.find("--weight-stream-source must be auto, pinned or file, got 'mmap'"),
            std::string::npos)
      << e;
  const model::HostMemory h = model::host_memory();
  EXPECT_GT(h.total, int64_t(1) << 28);
  EXPECT_GT(h.available, 0);
  EXPECT_LE(h.available, h.total);
}

TEST(WeightStreamPlan, TooSmallALimitNamesTheOptionAndTheBytes) {
  model::WeightStreamInput in = eight_blocks();
  in.limit = 899;  // streaming needs 900
  const std::string e = error_of([&] { model::plan_weight_streaming(in); });
  EXPECT_NE(e.find("device_memory_limit"), std::string::npos) << e;
  EXPECT_NE(e.find("(899 bytes)"), std::string::npos) << e;
  EXPECT_NE(e.find("(900 bytes"), std::string::npos) << e;
  in.limit = 900;
  EXPECT_TRUE(model::plan_weight_streaming(in).stream);
  in.limit = -1;
  EXPECT_NE(error_of([&] { model::plan_weight_streaming(in); }).find(">= 0"), std::string::npos);
}

// The target: the pruned int8 release model at 864x480, 124 frames under 24 GB streams
// and fits; resident it does not.
TEST(WeightStreamPlan, PrunedInt8ReleaseAt864x480StreamsWithin24GB) {
  H3Config c = H3Config::h3();
  c.adaln_curve_grid = 64;
  c.adaln_curve_rank = 8;
  const model::BlockStorage s = model::uniform_storage(c, LinearStorage::int8);
  const LatentShape sh = latent_shape_for(864, 480, 124, {0, 0, 0, 0});
  const SequenceLayout L = make_t2va_layout(100, sh.audio, sh.frames, sh.height, sh.width);
  model::WeightStreamInput in;
  in.limit = parse_memory_size("24GB");
  in.weight_bytes = model::model_weight_bytes(c, s);
  in.slot_bytes = model::block_slot_layout(c, s).bytes;
  in.blocks = c.layers;
  in.working_set_bytes = model::estimate_working_set_bytes(c, s, true, model::forward_shape(L));
  EXPECT_GT(in.weight_bytes, int64_t(19e9));
  EXPECT_LT(in.weight_bytes, int64_t(22e9));
  EXPECT_GT(in.weight_bytes + in.working_set_bytes, in.limit);
  const model::WeightStreamPlan p = model::plan_weight_streaming(in);
  EXPECT_TRUE(p.stream);
  EXPECT_LE(p.device_bytes, in.limit);
  EXPECT_GT(p.device_bytes + p.slot_bytes, in.limit);  // no block more than the limit needs
  EXPECT_GE(p.blocks.size(), 3u);
  EXPECT_LT(p.blocks.size(), 50u);
  EXPECT_EQ(p.h2d_bytes_per_step, int64_t(p.blocks.size()) * p.slot_bytes);
}

// The load's decision (plan_load): resident while the weights and the smallest request's working
// set fit the limit (the load then stays within it and a larger request streams at its first
// forward); below that the blocks stream as they load and the device holds the rest.
TEST(WeightStreamPlan, LoadStreamsOnlyWhenTheResidentModelCannotFitAtAll) {
  H3Config c = H3Config::tiny();
  c.layers = 5;
  const model::BlockStorage blocks = model::uniform_storage(c, LinearStorage::int8);
  const model::BlockStorage refiner = model::uniform_storage(c, LinearStorage::bf16);
  const int64_t w = model::model_weight_bytes(c, blocks, refiner);
  const int64_t slot = model::block_slot_layout(c, blocks).bytes;
  const int64_t least = model::estimate_working_set_bytes(c, blocks, false, {});
  const SequenceLayout L = make_t2va_layout(10, 9, 7, 8, 12);
  EXPECT_GT(least, model::kWorkingSetMarginBytes);
  EXPECT_LT(least, model::estimate_working_set_bytes(c, blocks, false, model::forward_shape(L)));

  model::LoadPlan p = model::plan_load(c, blocks, refiner, 0, false);
  EXPECT_FALSE(p.stream);
  EXPECT_EQ(p.weight_bytes, w);
  EXPECT_EQ(p.device_weight_bytes, w);
  p = model::plan_load(c, blocks, refiner, w + least, false);
  EXPECT_FALSE(p.stream);
  EXPECT_EQ(p.device_weight_bytes, w);

  p = model::plan_load(c, blocks, refiner, w + least - 1, false);  // 3 of the 5 blocks stream
  EXPECT_TRUE(p.stream);
  EXPECT_EQ(p.slot.bytes, slot);
  EXPECT_EQ(p.plan.blocks.size(), 3u);
  EXPECT_EQ(p.device_weight_bytes, w - 3 * slot);
  EXPECT_EQ(p.plan.resident_weight_bytes, w - 3 * slot);
  EXPECT_EQ(p.plan.host_bytes, 3 * slot);
  EXPECT_EQ(p.plan.device_bytes, w - 3 * slot + 2 * slot + least);

  const int64_t need = w - 3 * slot + least;  // the resident rest, 2 slots, no rows
  EXPECT_TRUE(model::plan_load(c, blocks, refiner, need, false).stream);
  const std::string e = error_of([&] { model::plan_load(c, blocks, refiner, need - 1, false); });
  EXPECT_NE(e.find("device_memory_limit"), std::string::npos) << e;
  const std::string bytes = std::to_string(need) + " bytes";  // not "(" + ...: GCC 12 misfires
  EXPECT_NE(e.find("(" + bytes), std::string::npos) << e;
}

// A synthetic model quantizes the transformer blocks only: its refiner stays bf16, and the
// two-storage byte count says so (one storage for both: the single-storage count).
TEST(WeightStreamPlan, RefinerStorageCountsApart) {
  const H3Config c = H3Config::tiny();
  const model::BlockStorage i8 = model::uniform_storage(c, LinearStorage::int8);
  const model::BlockStorage b16 = model::uniform_storage(c, LinearStorage::bf16);
  EXPECT_EQ(model::model_weight_bytes(c, i8, i8), model::model_weight_bytes(c, i8));
  const int64_t H = c.hidden, I = c.inner(), F = c.ffn;
  const int64_t weights = 3 * I * H + H * I + 2 * F * H + H * F;  // one byte each in int8
  const int64_t row_scales = (3 * I + H + 2 * F + H) * 4;
  EXPECT_EQ(model::model_weight_bytes(c, i8, b16) - model::model_weight_bytes(c, i8),
            c.refiner_layers * (weights - row_scales));
}

// The storage the CUDA upload gives each host layer format (model_cuda.cu's rule).
TEST(WeightStreamPlan, UploadStorageFollowsTheUploadRule) {
  LinearWeight l;
  l.format = WeightFormat::nvfp4;
  EXPECT_EQ(model::upload_storage(l), LinearStorage::nvfp4);
  l.format = WeightFormat::int8;
  EXPECT_EQ(model::upload_storage(l), LinearStorage::int8);
  l.format = WeightFormat::fp8_scaled;
  EXPECT_EQ(model::upload_storage(l), LinearStorage::bf16);  // no input scale: run dequantized
  l.fp8_dynamic_activations = true;
  EXPECT_EQ(model::upload_storage(l), LinearStorage::fp8);
  l.fp8_dynamic_activations = false;
  l.input_scale = tensor_from_f32({0.5f}, {1});
  EXPECT_EQ(model::upload_storage(l), LinearStorage::fp8);
  for (WeightFormat f : {WeightFormat::bf16, WeightFormat::f32}) {
    l.format = f;
    EXPECT_EQ(model::upload_storage(l), LinearStorage::bf16);
  }
  H3Config c = H3Config::tiny();
  RefinerBlockWeights b;
  b.attn.qkv.format = WeightFormat::int8;
  b.mlp.fc2.format = WeightFormat::nvfp4;
  model::BlockStorage s = model::upload_storage(c, b);
  EXPECT_EQ(s.qkv, LinearStorage::int8);
  EXPECT_EQ(s.out, LinearStorage::bf16);
  EXPECT_EQ(s.fc2, LinearStorage::nvfp4);
  EXPECT_EQ(s.adaln, LinearStorage::bf16);
  c.adaln_curve_grid = 64;
  c.adaln_curve_rank = 8;
  EXPECT_EQ(model::upload_storage(c, b).adaln, LinearStorage::f32);
}

// An unpruned int8 file's AdaLN layers stay int8 on the device (W8A8, adaln_int8_cuda.h): the
// blocks' images carry the int8 AdaLN matrix, its per-row scales stay resident, and the model
// holds one byte per AdaLN weight instead of bf16's two (13.0 GB less for the release shape).
TEST(WeightStreamPlan, Int8AdalnIsStoredAndStreamedInt8) {
  H3Config c = H3Config::h3();
  BlockWeights b;
  for (LinearWeight* l : {&b.attn.qkv, &b.attn.out, &b.mlp.fc1, &b.mlp.fc2, &b.adaln})
    l->format = WeightFormat::int8;
  const model::BlockStorage s = model::upload_storage(c, b);
  EXPECT_EQ(s.qkv, LinearStorage::int8);
  EXPECT_EQ(s.adaln, LinearStorage::int8);
  const int64_t H = c.hidden, Tm = c.adaln_in();
  const model::SlotLayout slot = model::block_slot_layout(c, s);
  ASSERT_EQ(slot.entries.back().name, "adaln.weight");
  EXPECT_EQ(slot.entries.back().bytes, 18 * H * Tm);
  model::BlockStorage b16 = s;
  b16.adaln = LinearStorage::bf16;
  EXPECT_EQ(slot.bytes + 18 * H * Tm, model::block_slot_layout(c, b16).bytes);
  // Per AdaLN layer [out, Tm]: out * Tm bytes less, out float32 row scales more.
  const int64_t saved = c.layers * (18 * H * Tm - 18 * H * 4) + (2 * H * Tm - 2 * H * 4);
  EXPECT_EQ(model::model_weight_bytes(c, b16) - model::model_weight_bytes(c, s), saved);
  EXPECT_NEAR(saved / 1e9, 13.0, 0.05);
  // The int8 AdaLN's activation scratch is in the working set.
  const model::ForwardShape none{};
  EXPECT_GT(model::estimate_working_set_bytes(c, s, true, none),
            model::estimate_working_set_bytes(c, b16, true, none));
  // A bf16 AdaLN beside int8 projections stays bf16; the curve form's stays float32.
  b.adaln.format = WeightFormat::bf16;
  EXPECT_EQ(model::upload_storage(c, b).adaln, LinearStorage::bf16);
  b.adaln.format = WeightFormat::int8;
  c.adaln_curve_grid = 64;
  c.adaln_curve_rank = 8;
  EXPECT_EQ(model::upload_storage(c, b).adaln, LinearStorage::f32);
}

// The bench's point (`bench step --preset h3 --gemm int8 --device-memory-limit 24GB`): the
// synthetic int8 h3 model (full AdaLN) cannot load resident under 24 GB; streamed at load the
// device holds its resident part only, and the 864x480 step's plan fits.
TEST(WeightStreamPlan, SyntheticInt8H3LoadsStreamedUnder24GB) {
  const H3Config c = H3Config::h3();
  const model::BlockStorage blocks = model::uniform_storage(c, LinearStorage::int8);
  const model::BlockStorage refiner = model::uniform_storage(c, LinearStorage::bf16);
  const int64_t limit = parse_memory_size("24GB");
  const model::LoadPlan p = model::plan_load(c, blocks, refiner, limit, true);
  EXPECT_GT(p.weight_bytes, limit);
  EXPECT_TRUE(p.stream);
  EXPECT_LE(p.plan.device_bytes, limit);
  EXPECT_LT(p.plan.blocks.size(), size_t(c.layers));
  EXPECT_EQ(p.device_weight_bytes + int64_t(p.plan.blocks.size()) * p.slot.bytes, p.weight_bytes);
  const LatentShape sh = latent_shape_for(864, 480, 124, {0, 0, 0, 0});
  const SequenceLayout L = make_t2va_layout(100, sh.audio, sh.frames, sh.height, sh.width);
  model::WeightStreamInput in;
  in.limit = limit;
  in.weight_bytes = p.weight_bytes;
  in.slot_bytes = p.slot.bytes;
  in.blocks = c.layers;
  in.working_set_bytes =
      model::estimate_working_set_bytes(c, blocks, true, model::forward_shape(L));
  in.streamed = p.plan.blocks;
  const model::WeightStreamPlan step = model::plan_weight_streaming(in);
  EXPECT_LE(step.device_bytes, limit);
  EXPECT_GT(step.blocks.size(), p.plan.blocks.size());  // the step's activations need more
}

// `h3rt info --device-memory-limit`: the plan at 864x480 for a checkpoint, and the option's
// parse error. The tiny model's two blocks save nothing by streaming (two slots hold both).
TEST(WeightStreamPlan, InfoSaysWhetherTheWeightsWouldStream) {
  const std::string w = test::golden_dir() + "/weights.safetensors";
  const test::CliRun big = test::run_cli("info " + w + " --device-memory-limit 1TB", false);
  ASSERT_EQ(big.status, 0) << big.output;
  EXPECT_NE(big.output.find("CUDA: "), std::string::npos) << big.output;
  EXPECT_NE(big.output.find("the weights stay resident"), std::string::npos) << big.output;
  EXPECT_NE(big.output.find("load: resident"), std::string::npos) << big.output;
  const test::CliRun small = test::run_cli("info " + w + " --device-memory-limit 1MB", false);
  ASSERT_EQ(small.status, 0) << small.output;
  EXPECT_NE(small.output.find("too small: device_memory_limit"), std::string::npos) << small.output;
  const test::CliRun bad = test::run_cli("info " + w + " --device-memory-limit 1XB");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("--device-memory-limit must be a size"), std::string::npos)
      << bad.output;
}

// A twelve-block checkpoint that streams at 864x480 under the limit: info says which source
// --weight-stream-source auto takes on this host and what the file source pins.
TEST(WeightStreamPlan, InfoNamesTheSourceAutoTakesHere) {
  H3Config c = H3Config::tiny();
  c.layers = 12;
  NamedTensors t;
  for (const auto& spec : model::weight_specs(c))
    t.emplace_back(spec.key, Tensor::zeros(spec.dtype, spec.shape));
  test::TempDir dir("h3rt_info_stream");
  const std::string path = dir.file("twelve.safetensors");
  write_safetensors(path, t);
  const model::BlockStorage st = model::uniform_storage(c, LinearStorage::bf16);
  const LatentShape sh = latent_shape_for(864, 480, 124, {0, 0, 0, 0});
  const SequenceLayout L = make_t2va_layout(100, sh.audio, sh.frames, sh.height, sh.width);
  const int64_t slot = model::block_slot_layout(c, st).bytes;
  const int64_t limit = model::model_weight_bytes(c, st) - 5 * slot +  // 7 blocks stream
                        model::estimate_working_set_bytes(c, st, true, model::forward_shape(L));
  const test::CliRun r =
      test::run_cli("info " + path + " --device-memory-limit " + std::to_string(limit), false);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("the weights of 7 of the 12 blocks stream"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("--weight-stream-source auto takes pinned here"), std::string::npos)
      << r.output;  // 12 x ~0.5 MB fits any host
  char staging[64];
  std::snprintf(staging, sizeof staging, "%.2f GB pinned for staging", 2 * slot / 1e9);
  EXPECT_NE(r.output.find(staging), std::string::npos) << r.output;
}

}  // namespace
}  // namespace h3rt
