// Block weights streamed from pinned host memory into device slots (the plan, what streams and
// its cost: model/weight_stream_plan.h).
//
// stream_block_weights moves the streamed tensors of the plan's transformer blocks (some or
// all) into one pinned host image per block (laid out as a slot) and frees their device memory;
// those DeviceBlocks keep host views of them (Device::cpu), so formats and shapes read as before
// but no kernel can take them. The other blocks stay resident. A forward session then holds a
// BlockWeightStream: `slots` device slots, a copy stream and, per streamed block, a DeviceBlock
// whose streamed tensors view its slot (the k-th streamed block: slot k % slots). Per range of
// blocks [first, last) enqueued on the compute stream s:
//   begin:   s records a fork event the copy stream waits on (this joins a graph capture and
//            orders the copies after every earlier user of the slots), then copies the range's
//            first `slots` streamed blocks;
//   acquire: s waits for block i's copy (a resident block: nothing);
//   release: s records that block i's work is enqueued; the copy stream waits for it and copies
//            the range's streamed block `slots` after i into the freed slot, overlapped with the
//            blocks between them (a resident block: nothing).
// Every copy is waited on by an acquire on s, so a captured graph joins the copy stream again.
// The bits are those of resident weights: the kernels read the same bytes from another address.
// Source file (WeightStreamSource::file): a block's tensors stay where the load found them
// (views of the mapped checkpoint or the caller's host tensors; host copies of converted ones)
// and a copy is two steps: a host function on a gather stream of its own gathers the block into
// the slot's pinned staging image (memcpy on several threads, which reads the file's pages, and
// asks the kernel to read ahead the next block's), then the copy stream waits for it and makes
// the H2D copy. A gather waits only for the last copy out of its staging image (and a range's
// first gathers for every copy queued before the range), so it overlaps the copy of the block
// before it and the compute of the slot's previous block; the gathers are the bound where the
// host copies slower than PCIe. Host functions are captured as graph nodes: replays gather
// again (the file is read every step).
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "model/model_cuda.h"
#include "model/weight_stream_plan.h"

namespace h3rt::model {

// The host side of a streamed model's blocks (DeviceModel::streamed).
struct StreamedBlocks {
  SlotLayout layout;  // the same for every block
  WeightStreamSource source = WeightStreamSource::pinned;
  std::vector<int64_t> blocks;  // the streamed blocks, ascending (the rest are resident)
  // Per streamed block (in `blocks` order): pinned, layout.bytes of pinned memory; file, its
  // host tensors in slot order.
  std::vector<std::shared_ptr<void>> images;
  std::vector<std::vector<Tensor>> sources;
  std::vector<const void*> files;  // file: one address in each mapped file the sources view
  // The position of block i in `blocks`, -1 when it is resident.
  int64_t ordinal(int64_t i) const;
};

// Throws naming the checkpoint when a file the model's streamed blocks are read from (source
// file) was written or truncated on disk since it was loaded: the next step would read other
// bytes, or fault on pages past the new end. A no-op for pinned or resident blocks.
void check_stream_sources(const DeviceModel& m);

// The streamed tensors of a block, in slot order (block_slot_layout's names).
std::vector<std::pair<std::string, Tensor*>> streamed_tensors(DeviceBlock& b);
// The slot layout of a block's streamed tensors as it holds them.
SlotLayout block_slot_layout(const DeviceBlock& b);
// How a device block stores its projections and AdaLN.
BlockStorage block_storage(const DeviceBlock& b);
// Bytes of every weight tensor of the model, on the device or streamed.
int64_t model_weight_bytes(const DeviceModel& m);

// The host side of a model's blocks, written one block at a time: by stream_block_weights
// from a resident model, and by the streamed load (upload_model, make_synthetic_gemm_model),
// which writes each block as it is made so the whole model is never on the device. Pinned:
// every image is pinned up front, so a host short of memory fails before any block is read.
// File: host tensors are kept where they are; device ones (a resident model's, or a preset's
// made on the device) get host copies, or their `kept` host source (DeviceModel::block_sources).
// The blocks written are `streamed` (ascending; empty: all `blocks`); with `previous` (a model
// that already streams some), those it streams are taken over as they are and `source` must be
// its source.
class BlockImageWriter {
 public:
  BlockImageWriter(const SlotLayout& layout, size_t blocks,
                   WeightStreamSource source = WeightStreamSource::pinned,
                   const std::vector<int64_t>& streamed = {},
                   const StreamedBlocks* previous = nullptr);
  bool streams(size_t i) const;  // block i is to be written
  // Copies (pinned) or keeps (file) block i's streamed tensors and swaps them for host tensors
  // (their device memory, if any, goes back to the arena). `kept`: host tensors with the same
  // bytes as the device ones, in slot order, undefined where there is none. Throws naming the
  // block when its tensors do not match the layout.
  void write(size_t i, DeviceBlock& b, const std::vector<Tensor>* kept = nullptr);
  std::shared_ptr<const StreamedBlocks> finish();  // after every block was written
 private:
  void keep(size_t ord, std::vector<std::pair<std::string, Tensor*>>& tensors,
            const std::vector<Tensor>* kept);
  std::shared_ptr<StreamedBlocks> st_;
  std::vector<int64_t> ordinal_;  // per block: its place in st_->blocks, -1 if resident
  std::vector<bool> written_;     // per streamed block
};

// The device peak of one load: the default arena's reserved bytes above what it held when the
// meter was made, its cache given back first (so the figure is this load's alone, not an earlier
// model's leftovers): the reports' weight_streaming.load_peak_device_bytes.
class LoadMeter {
 public:
  LoadMeter();
  int64_t peak() const;

 private:
  int64_t base_ = 0;
};

// `w` (a forward's plan) with the load's fields of `load` (streamed_at_load,
// load_peak_device_bytes, caller_device_bytes).
WeightStreaming with_load(WeightStreaming w, const WeightStreaming& load);

// Moves the streamed tensors of `blocks` (ascending; empty: every block) to host memory: pinned
// copies, or for file the load's host sources (DeviceModel::block_sources) and host copies of
// the rest. Blocks that already stream stay as they are (a model that streams keeps its source).
// Throws when the blocks store their linears differently (one slot layout serves all).
void stream_block_weights(DeviceModel& m, WeightStreamSource source = WeightStreamSource::pinned,
                          const std::vector<int64_t>& blocks = {});

// The plan for a session of `layout` on m under `limit` (m's weight bytes and block layout, the
// shape's estimated working set); moves the blocks it streams to host memory, from
// choose_stream_source(`source`, ...) with the host's memory now. Blocks that are the caller's
// CUDA tensors never stream (copying them out would free none of their device memory). Throws as
// plan_weight_streaming when the limit is too small.
WeightStreamPlan apply_weight_streaming(DeviceModel& m, const SequenceLayout& layout, int64_t limit,
                                        bool sage_attention,
                                        WeightStreamSource source = WeightStreamSource::pinned);

class BlockWeightStream {
 public:
  explicit BlockWeightStream(const DeviceModel& m, int slots = 2);
  ~BlockWeightStream();
  BlockWeightStream(const BlockWeightStream&) = delete;
  BlockWeightStream& operator=(const BlockWeightStream&) = delete;

  // `timed` (eager steps only): events around each copy and gather, summed by copy_ms().
  void begin(int64_t first, int64_t last, cudaStream_t s, bool timed);
  const DeviceBlock& acquire(int64_t i, cudaStream_t s);
  void release(int64_t i, cudaStream_t s);

  void reset_timing();
  // Busy time in the timed ranges (after they finished) of the host-to-device copies, and of
  // the file source's gathers into the staging images (they overlap the copies).
  double copy_ms() const;
  double gather_ms() const;
  int slots() const { return static_cast<int>(slots_.size()); }
  int64_t slot_bytes() const { return layout_.bytes; }

 private:
  struct Gather {  // a host function's argument: stable for the graphs that capture it
    BlockWeightStream* stream;
    int64_t ordinal;
    std::vector<CopyPiece> pieces;  // the block's sources into its slot's staging image
  };
  static void CUDART_CB gather_host(void* gather);
  void gather(int64_t k) noexcept;  // file: streamed block k's tensors -> its staging image
  // Streamed block `k` (ordinal) into its slot on the copy stream, after `after` (the slot's
  // previous block done); file: gathered first on the gather stream.
  void copy(int64_t k, cudaEvent_t after);
  // File: block k's gather into its staging image, on the gather stream once the image's last
  // copy to the device is done, so that it overlaps the copy of the block before it.
  void stage(int64_t k);
  void make_staging(int slots);  // file: the pinned staging images and each block's gather
  int timer_begin(cudaStream_t s, bool gather);  // an index into timing_ when timed_, else -1
  void timer_end(int t, cudaStream_t s);
  double timed_ms(bool gather) const;
  // The model's streamed blocks (images or file sources), owned here too: the graphs' host and
  // copy nodes read them for as long as this stream lives, whatever becomes of the model's.
  std::shared_ptr<const StreamedBlocks> streamed_;
  SlotLayout layout_;
  std::vector<Tensor> slots_;
  std::vector<std::shared_ptr<void>> staging_;  // file: a pinned image per slot
  std::vector<Gather> gathers_;                 // file: per streamed block
  int gather_threads_ = 8;                      // file: H3RT_GATHER_THREADS (side by side runs)
  // Per block: the model's; a streamed one's tensors in its slot (ordinal % slots).
  std::vector<DeviceBlock> views_;
  std::vector<int64_t> ordinal_;  // per block: its place among the streamed, -1 if resident
  cudaStream_t copy_ = nullptr;
  cudaStream_t gather_ = nullptr;  // file: the host gathers, apart from the copies
  cudaEvent_t fork_ = nullptr;
  cudaEvent_t copy_tail_ = nullptr;         // file: the gathers of a range follow its copies
  std::vector<cudaEvent_t> copied_, done_;  // per slot
  // File, per staging image: gathered into it, copied out of it (the next gather into it in the
  // same range waits for that copy).
  std::vector<cudaEvent_t> gathered_, uploaded_;
  int64_t range_first_ = 0;  // the range's first streamed block (ordinal)
  int64_t last_ = 0;
  bool timed_ = false;
  struct Timer {
    cudaEvent_t begin, end;
    bool gather;
  };
  std::vector<Timer> timing_;  // per timed copy or gather
  size_t timing_used_ = 0;
};

}  // namespace h3rt::model
#endif  // H3RT_HAVE_CUDA
