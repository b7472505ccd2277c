// Block weight streaming (see weight_stream_cuda.h).
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/env.h"
#include "core/parallel.h"
#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "h3rt/memory.h"
#include "io/mapped_files.h"
#include "model/weight_stream_cuda.h"

namespace h3rt::model {

LoadMeter::LoadMeter() {
  cuda::default_arena().release_cached();
  base_ = cuda::default_arena().stats().current_reserved;
  cuda::default_arena().reset_peak();
}

int64_t LoadMeter::peak() const {
  return cuda::default_arena().stats().peak_reserved - base_;
}

WeightStreaming with_load(WeightStreaming w, const WeightStreaming& load) {
  w.limit_auto = load.limit_auto;
  w.streamed_at_load = load.streamed_at_load;
  w.load_peak_device_bytes = load.load_peak_device_bytes;
  w.caller_device_bytes = load.caller_device_bytes;
  return w;
}
namespace {

// The weight matrix a linear computes with (one of w, w8, wi8, w4), or null.
Tensor* matrix_of(DeviceLinear& l) {
  for (Tensor* t : {&l.w, &l.w8, &l.wi8, &l.w4})
    if (t->data()) return t;
  return nullptr;
}

LinearStorage storage_of(const DeviceLinear& l) {
  if (l.int8()) return LinearStorage::int8;
  if (l.fp8()) return LinearStorage::fp8;
  if (l.nvfp4()) return LinearStorage::nvfp4;
  return l.w.dtype() == DType::f32 ? LinearStorage::f32 : LinearStorage::bf16;
}

// A tensor's bytes, 0 when it holds none: an unset Tensor has shape {} (numel 1), so nbytes()
// alone would count one element for every absent bias, scale or format field (1,400 bytes on the
// 5-block tiny model, H200 session 12).
int64_t held_bytes(const Tensor& t) {
  return t.data() ? t.nbytes() : 0;
}

int64_t linear_bytes(const DeviceLinear& l) {
  int64_t n = 0;
  for (const Tensor* t : {&l.w, &l.b, &l.w8, &l.w_scale, &l.x_scale, &l.w4, &l.w4_scales,
                          &l.w4_global, &l.x4_global, &l.wi8, &l.wi8_scale})
    n += held_bytes(*t);
  return n;
}

int64_t block_bytes(const DeviceBlock& b) {
  int64_t n =
      held_bytes(b.norm1) + held_bytes(b.norm2) + held_bytes(b.q_norm) + held_bytes(b.k_norm);
  for (const DeviceLinear* l : {&b.qkv, &b.out, &b.fc1, &b.fc2, &b.adaln}) n += linear_bytes(*l);
  return n;
}

bool same_layout(const SlotLayout& a, const SlotLayout& b) {
  if (a.bytes != b.bytes || a.entries.size() != b.entries.size()) return false;
  for (size_t i = 0; i < a.entries.size(); ++i)
    if (a.entries[i].name != b.entries[i].name || a.entries[i].bytes != b.entries[i].bytes)
      return false;
  return true;
}

// Image `i` of `bytes` in page-locked host memory (`n` of them in all): a block's (`staging`
// false) or a slot's staging image.
std::shared_ptr<void> pinned(size_t bytes, size_t i, size_t n, bool staging = false) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (staging)
      H3RT_FAIL("weight streaming (device_memory_limit, weight_stream_source file): cannot pin ",
                bytes / 1e9, " GB of host memory for staging image ", i, " of ", n, " (",
                bytes * n / 1e9, " GB in all): ", cudaGetErrorString(err));
    H3RT_FAIL("weight streaming (device_memory_limit): cannot pin ", bytes / 1e9,
              " GB of host memory for block ", i, "'s weights (", bytes * n / 1e9, " GB for all ",
              n, " blocks): ", cudaGetErrorString(err),
              "; the streamed weights need that much free host memory, or read them from the "
              "file as they are needed (weight_stream_source file)");
  }
  return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
}

}  // namespace

std::vector<std::pair<std::string, Tensor*>> streamed_tensors(DeviceBlock& b) {
  std::vector<std::pair<std::string, Tensor*>> v;
  const std::pair<const char*, DeviceLinear*> linears[] = {
      {"qkv", &b.qkv}, {"out", &b.out}, {"fc1", &b.fc1}, {"fc2", &b.fc2}, {"adaln", &b.adaln}};
  for (const auto& [name, l] : linears) {
    Tensor* m = matrix_of(*l);
    if (!m) continue;
    v.push_back({std::string(name) + ".weight", m});
    if (l->w4_scales.data()) v.push_back({std::string(name) + ".weight_scale", &l->w4_scales});
  }
  return v;
}

SlotLayout block_slot_layout(const DeviceBlock& b) {
  SlotLayout l;
  for (const auto& [name, t] : streamed_tensors(const_cast<DeviceBlock&>(b)))
    l.add(name, t->nbytes());
  return l;
}

BlockStorage block_storage(const DeviceBlock& b) {
  BlockStorage s;
  s.qkv = storage_of(b.qkv);
  s.out = storage_of(b.out);
  s.fc1 = storage_of(b.fc1);
  s.fc2 = storage_of(b.fc2);
  s.adaln = storage_of(b.adaln);
  return s;
}

int64_t model_weight_bytes(const DeviceModel& m) {
  int64_t n = held_bytes(m.refiner_norm) + held_bytes(m.final_norm);
  for (const DeviceLinear* l :
       {&m.video_in, &m.audio_in, &m.text_in, &m.final_adaln, &m.video_out, &m.audio_out})
    n += linear_bytes(*l);
  for (const auto* list : {&m.refiner, &m.blocks})
    for (const DeviceBlock& b : *list) n += block_bytes(b);
  return n;
}

int64_t StreamedBlocks::ordinal(int64_t i) const {
  const auto it = std::lower_bound(blocks.begin(), blocks.end(), i);
  return it != blocks.end() && *it == i ? it - blocks.begin() : -1;
}

BlockImageWriter::BlockImageWriter(const SlotLayout& layout, size_t blocks,
                                   WeightStreamSource source, const std::vector<int64_t>& streamed,
                                   const StreamedBlocks* previous)
    : st_(std::make_shared<StreamedBlocks>()), ordinal_(blocks, -1) {
  H3RT_CHECK(source != WeightStreamSource::automatic,
             "BlockImageWriter: choose the source first (choose_stream_source)");
  H3RT_CHECK(!previous || (previous->source == source && same_layout(previous->layout, layout)),
             "BlockImageWriter: more blocks stream with the source and layout of those before");
  const MemoryScope scope("the pinned host copies of the streamed block weights");
  st_->layout = layout;
  st_->source = source;
  st_->blocks = streamed;
  if (streamed.empty())
    for (size_t i = 0; i < blocks; ++i) st_->blocks.push_back(static_cast<int64_t>(i));
  const size_t n = st_->blocks.size();
  for (size_t k = 0; k < n; ++k) {
    const int64_t i = st_->blocks[k];
    H3RT_CHECK(i >= 0 && static_cast<size_t>(i) < blocks && (k == 0 || i > st_->blocks[k - 1]),
               "BlockImageWriter: streamed blocks out of range or order");
    ordinal_[static_cast<size_t>(i)] = static_cast<int64_t>(k);
  }
  written_.assign(n, false);
  if (source == WeightStreamSource::file)
    st_->sources.resize(n);
  else
    st_->images.resize(n);
  if (previous)  // taken over as they are
    for (size_t j = 0; j < previous->blocks.size(); ++j) {
      const int64_t k = ordinal_.at(static_cast<size_t>(previous->blocks[j]));
      H3RT_CHECK(k >= 0, "BlockImageWriter: block ", previous->blocks[j],
                 " streams already and must stay streamed");
      if (source == WeightStreamSource::file)
        st_->sources[size_t(k)] = previous->sources[j];
      else
        st_->images[size_t(k)] = previous->images[j];
      written_[size_t(k)] = true;
    }
  if (source == WeightStreamSource::pinned)  // all pinned up front: a short host fails early
    for (size_t k = 0; k < n; ++k)
      if (!written_[k]) st_->images[k] = pinned(static_cast<size_t>(layout.bytes), k, n);
}

bool BlockImageWriter::streams(size_t i) const {
  return i < ordinal_.size() && ordinal_[i] >= 0;
}

namespace {

// A pageable host copy of a device tensor (the file source's fallback).
Tensor host_copy_of(const Tensor& t) {
  const MemoryScope scope("host copies of streamed block weights without a host source");
  Tensor h = Tensor::zeros(t.dtype(), t.shape());
  H3RT_CUDA_CHECK(
      cudaMemcpy(h.data(), t.data(), static_cast<size_t>(t.nbytes()), cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

// File: the block's host tensors as they are (device ones replaced by their kept source or a
// host copy); their device memory, if any, goes back to the arena.
void BlockImageWriter::keep(size_t ord, std::vector<std::pair<std::string, Tensor*>>& tensors,
                            const std::vector<Tensor>* kept) {
  std::vector<Tensor>& out = st_->sources[ord];
  const int64_t i = st_->blocks[ord];
  for (size_t k = 0; k < tensors.size(); ++k) {
    Tensor& t = *tensors[k].second;
    H3RT_CHECK(t.is_contiguous(), "weight streaming: ", tensors[k].first, " of block ", i,
               " is not contiguous");
    if (t.device() == Device::cuda) {
      const Tensor* s = kept && k < kept->size() ? &(*kept)[k] : nullptr;
      const bool same = s && s->data() && s->device() == Device::cpu && s->dtype() == t.dtype() &&
                        s->shape() == t.shape() && s->is_contiguous();
      t = same ? *s : host_copy_of(t);
    }
    out.push_back(t);
  }
}

void BlockImageWriter::write(size_t i, DeviceBlock& b, const std::vector<Tensor>* kept) {
  H3RT_CHECK(streams(i) && !written_[size_t(ordinal_[i])], "BlockImageWriter: block ", i,
             " does not stream or was written twice");
  const size_t ord = static_cast<size_t>(ordinal_[i]);
  H3RT_CHECK(same_layout(block_slot_layout(b), st_->layout), "block ", i, " (blocks.", i,
             ".*) stores its linears in other formats or shapes than the streamed layout (",
             st_->layout.bytes,
             " bytes per block, from block 0's formats); weight streaming "
             "(device_memory_limit) needs one layout for every block");
  const SlotLayout& layout = st_->layout;
  auto tensors = streamed_tensors(b);
  for (const auto& [name, t] : tensors)  // whatever wrote them (kernels on other streams)
    if (t->device() == Device::cuda) {
      H3RT_CUDA_CHECK(cudaDeviceSynchronize());
      break;
    }
  if (st_->source == WeightStreamSource::file) {
    keep(ord, tensors, kept);
    written_[ord] = true;
    return;
  }
  const std::shared_ptr<void>& image = st_->images[ord];
  char* base = static_cast<char*>(image.get());
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = *tensors[k].second;
    H3RT_CHECK(t.is_contiguous(), "weight streaming: ", tensors[k].first, " of block ", i,
               " is not contiguous");
    if (t.device() == Device::cpu)
      std::memcpy(base + layout.entries[k].offset, t.data(), static_cast<size_t>(t.nbytes()));
    else  // synchronous: the device copy may go back to the arena after it
      H3RT_CUDA_CHECK(cudaMemcpy(base + layout.entries[k].offset, t.data(),
                                 static_cast<size_t>(t.nbytes()), cudaMemcpyDefault));
  }
  for (size_t k = 0; k < tensors.size(); ++k) {
    Tensor& t = *tensors[k].second;
    t = Tensor(base + layout.entries[k].offset, t.dtype(), t.shape(), image, Device::cpu);
  }
  written_[ord] = true;
}

std::shared_ptr<const StreamedBlocks> BlockImageWriter::finish() {
  for (size_t k = 0; k < written_.size(); ++k)
    H3RT_CHECK(written_[k], "BlockImageWriter: block ", st_->blocks[k], " was never written");
  for (const auto& block : st_->sources)
    for (const Tensor& t : block)
      if (const void* f = mapping_of(t.data()))
        if (std::find(st_->files.begin(), st_->files.end(), f) == st_->files.end())
          st_->files.push_back(f);
  return st_;
}

void check_stream_sources(const DeviceModel& m) {
  if (!m.streamed) return;
  for (const void* f : m.streamed->files) {
    const std::string change = mapped_file_change(f);
    H3RT_CHECK(change.empty(),
               "weight streaming from the file (weight_stream_source file): ", change,
               ". The blocks are read from it at every step, so it must stay as it was; load "
               "the model again (a new file put in place by a rename is safe)");
  }
}

void stream_block_weights(DeviceModel& m, WeightStreamSource source,
                          const std::vector<int64_t>& blocks) {
  if (m.blocks.empty()) return;
  std::vector<int64_t> want = blocks;
  if (want.empty())
    for (size_t i = 0; i < m.blocks.size(); ++i) want.push_back(static_cast<int64_t>(i));
  if (m.streamed) {  // those already streamed stay, with their source
    want.insert(want.end(), m.streamed->blocks.begin(), m.streamed->blocks.end());
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    if (want == m.streamed->blocks) return;
    source = m.streamed->source;
  }
  const SlotLayout layout = m.streamed ? m.streamed->layout : block_slot_layout(m.blocks[0]);
  for (int64_t i : want)
    H3RT_CHECK(same_layout(block_slot_layout(m.blocks[size_t(i)]), layout), "block ", i,
               " (blocks.", i,
               ".*) stores its linears in other formats or shapes than block 0; "
               "weight streaming (device_memory_limit) needs one layout for every block");
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());  // whatever wrote the weights (other streams)
  // Pinned: all pinned first, so a failure leaves m as it was.
  BlockImageWriter w(layout, m.blocks.size(), source, want, m.streamed.get());
  for (int64_t i : want) {
    const size_t b = static_cast<size_t>(i);
    if (m.streamed && m.streamed->ordinal(i) >= 0) continue;
    w.write(b, m.blocks[b], b < m.block_sources.size() ? &m.block_sources[b] : nullptr);
  }
  m.streamed = w.finish();
  if (m.streamed->blocks.size() == m.blocks.size()) m.block_sources.clear();  // none left to move
  cuda::default_arena().release_cached();  // the freed blocks go back to the driver
}

WeightStreamPlan apply_weight_streaming(DeviceModel& m, const SequenceLayout& layout, int64_t limit,
                                        bool sage, WeightStreamSource source) {
  H3RT_CHECK(!m.blocks.empty(), "weight streaming: the model has no transformer blocks");
  WeightStreamInput w;
  w.limit = limit;
  w.weight_bytes = model_weight_bytes(m);
  w.slot_bytes = m.streamed ? m.streamed->layout.bytes : block_slot_layout(m.blocks[0]).bytes;
  w.blocks = static_cast<int64_t>(m.blocks.size());
  BlockStorage storage = block_storage(m.blocks[0]);
  storage.int8_io = m.has_int8_io();
  w.working_set_bytes = estimate_working_set_bytes(m.config, storage, sage, forward_shape(layout));
  if (m.streamed) w.streamed = m.streamed->blocks;
  w.fixed = m.caller_blocks;
  const WeightStreamPlan p = plan_weight_streaming(w);
  if (!p.stream) return p;
  if (!m.streamed || p.blocks != m.streamed->blocks)
    stream_block_weights(m, choose_stream_source(source, p.host_bytes, host_memory()), p.blocks);
  return with_source(p, m.streamed->source);
}

BlockWeightStream::BlockWeightStream(const DeviceModel& m, int slots) : streamed_(m.streamed) {
  H3RT_CHECK(streamed_, "BlockWeightStream: the model's blocks do not stream");
  H3RT_CHECK(slots >= 2, "BlockWeightStream: needs >= 2 slots, got ", slots);
  const MemoryScope scope("the device slots of the streamed block weights");
  layout_ = streamed_->layout;
  for (int k = 0; k < slots; ++k) slots_.push_back(cuda::device_empty(DType::u8, {layout_.bytes}));
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    views_.push_back(m.blocks[i]);
    ordinal_.push_back(streamed_->ordinal(static_cast<int64_t>(i)));
    if (ordinal_.back() < 0) continue;  // resident: the model's tensors
    char* base = static_cast<char*>(slots_[size_t(ordinal_.back()) % slots_.size()].data());
    auto tensors = streamed_tensors(views_.back());
    for (size_t k = 0; k < tensors.size(); ++k) {
      Tensor& t = *tensors[k].second;
      t = Tensor(base + layout_.entries[k].offset, t.dtype(), t.shape(), nullptr, Device::cuda);
    }
  }
  if (streamed_->source == WeightStreamSource::file) {
    gather_threads_ = env_count("H3RT_GATHER_THREADS", 8, 1, 64);
    make_staging(slots);
  }
  H3RT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  H3RT_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  for (auto* list : {&copied_, &done_}) {
    list->resize(slots);
    for (cudaEvent_t& e : *list)
      H3RT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  if (staging_.empty()) return;
  H3RT_CUDA_CHECK(cudaStreamCreateWithFlags(&gather_, cudaStreamNonBlocking));
  H3RT_CUDA_CHECK(cudaEventCreateWithFlags(&copy_tail_, cudaEventDisableTiming));
  for (auto* list : {&gathered_, &uploaded_}) {
    list->resize(staging_.size());
    for (cudaEvent_t& e : *list)
      H3RT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
}

void BlockWeightStream::make_staging(int slots) {
  for (int k = 0; k < slots; ++k)
    staging_.push_back(pinned(static_cast<size_t>(layout_.bytes), k, slots, true));
  for (size_t o = 0; o < streamed_->blocks.size(); ++o) {  // its sources -> staging o % slots
    Gather g{this, static_cast<int64_t>(o), {}};
    char* dst = static_cast<char*>(staging_[o % staging_.size()].get());
    const std::vector<Tensor>& src = streamed_->sources[o];
    for (size_t k = 0; k < src.size(); ++k)
      g.pieces.push_back({dst + layout_.entries[k].offset, src[k].data(), src[k].nbytes()});
    gathers_.push_back(std::move(g));
  }
}

BlockWeightStream::~BlockWeightStream() {
  if (gather_) cudaStreamSynchronize(gather_);
  if (copy_) cudaStreamSynchronize(copy_);
  for (auto* list : {&copied_, &done_, &gathered_, &uploaded_})
    for (cudaEvent_t e : *list) cudaEventDestroy(e);
  for (const Timer& t : timing_) {
    cudaEventDestroy(t.begin);
    cudaEventDestroy(t.end);
  }
  if (fork_) cudaEventDestroy(fork_);
  if (copy_tail_) cudaEventDestroy(copy_tail_);
  if (gather_) cudaStreamDestroy(gather_);
  if (copy_) cudaStreamDestroy(copy_);
}

int BlockWeightStream::timer_begin(cudaStream_t s, bool gather) {
  if (!timed_) return -1;
  if (timing_used_ == timing_.size()) {
    Timer t{};
    H3RT_CUDA_CHECK(cudaEventCreate(&t.begin));
    H3RT_CUDA_CHECK(cudaEventCreate(&t.end));
    timing_.push_back(t);
  }
  timing_[timing_used_].gather = gather;
  H3RT_CUDA_CHECK(cudaEventRecord(timing_[timing_used_].begin, s));
  return static_cast<int>(timing_used_++);
}

void BlockWeightStream::timer_end(int t, cudaStream_t s) {
  if (t >= 0) H3RT_CUDA_CHECK(cudaEventRecord(timing_[static_cast<size_t>(t)].end, s));
}

void CUDART_CB BlockWeightStream::gather_host(void* g) {
  const Gather* task = static_cast<const Gather*>(g);
  task->stream->gather(task->ordinal);
}

namespace {

// Asks the kernel to read t's pages ahead (a hint: errors, e.g. on heap memory, are ignored).
void read_ahead(const Tensor& t) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGE_SIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(t.data());
  const uintptr_t begin = a / page * page;
  posix_madvise(reinterpret_cast<void*>(begin), a + static_cast<uintptr_t>(t.nbytes()) - begin,
                POSIX_MADV_WILLNEED);
}

}  // namespace

// Runs on the CUDA driver's callback thread: no CUDA calls, no exceptions out (parallel_copy
// starts and joins its threads here). The next block's read-ahead is asked for after this
// block's copy, so that on a cold file its I/O does not compete with the pages the GPU waits for.
void BlockWeightStream::gather(int64_t o) noexcept {
  parallel_copy(gathers_[static_cast<size_t>(o)].pieces, gather_threads_);
  const std::vector<Tensor>& next =
      streamed_->sources[static_cast<size_t>(o + 1) % streamed_->sources.size()];
  for (const Tensor& t : next) read_ahead(t);
}

void BlockWeightStream::stage(int64_t o) {
  const size_t k = static_cast<size_t>(o) % staging_.size();
  // The image's last copy in this range (ordinals are copied in order within a range).
  if (o - static_cast<int64_t>(staging_.size()) >= range_first_)
    H3RT_CUDA_CHECK(cudaStreamWaitEvent(gather_, uploaded_[k], 0));
  const int t = timer_begin(gather_, true);
  H3RT_CUDA_CHECK(cudaLaunchHostFunc(gather_, &gather_host, &gathers_[static_cast<size_t>(o)]));
  timer_end(t, gather_);
  H3RT_CUDA_CHECK(cudaEventRecord(gathered_[k], gather_));
  H3RT_CUDA_CHECK(cudaStreamWaitEvent(copy_, gathered_[k], 0));
}

void BlockWeightStream::copy(int64_t o, cudaEvent_t after) {
  const size_t k = static_cast<size_t>(o) % slots_.size();
  char* slot = static_cast<char*>(slots_[k].data());
  // File: one staging image per slot, gathered while the slot's previous block may still
  // compute and copy.
  const bool file = !staging_.empty();
  if (file) stage(o);
  if (after) H3RT_CUDA_CHECK(cudaStreamWaitEvent(copy_, after, 0));
  const int t = timer_begin(copy_, false);
  const void* from = file ? staging_[k].get() : streamed_->images[static_cast<size_t>(o)].get();
  H3RT_CUDA_CHECK(cudaMemcpyAsync(slot, from, layout_.bytes, cudaMemcpyHostToDevice, copy_));
  timer_end(t, copy_);
  if (file) H3RT_CUDA_CHECK(cudaEventRecord(uploaded_[k], copy_));
  H3RT_CUDA_CHECK(cudaEventRecord(copied_[k], copy_));
}

void BlockWeightStream::begin(int64_t first, int64_t last, cudaStream_t s, bool timed) {
  H3RT_CHECK(first >= 0 && first <= last && last <= static_cast<int64_t>(views_.size()),
             "BlockWeightStream: blocks [", first, ", ", last, ") out of range");
  last_ = last;
  timed_ = timed;
  if (first == last) return;
  // The range's first streamed block (its ordinal), and the first beyond the range.
  const std::vector<int64_t>& b = streamed_->blocks;
  const int64_t o0 = std::lower_bound(b.begin(), b.end(), first) - b.begin();
  const int64_t end = std::lower_bound(b.begin(), b.end(), last) - b.begin();
  if (o0 == end) return;  // only resident blocks: nothing to copy
  H3RT_CUDA_CHECK(cudaEventRecord(fork_, s));
  H3RT_CUDA_CHECK(cudaStreamWaitEvent(copy_, fork_, 0));
  range_first_ = o0;
  if (gather_) {  // after every copy queued so far (a range that threw may have left some)
    H3RT_CUDA_CHECK(cudaEventRecord(copy_tail_, copy_));
    H3RT_CUDA_CHECK(cudaStreamWaitEvent(gather_, copy_tail_, 0));
  }
  const int64_t n = static_cast<int64_t>(slots_.size());
  for (int64_t o = o0; o < std::min(o0 + n, end); ++o) copy(o, nullptr);
}

const DeviceBlock& BlockWeightStream::acquire(int64_t i, cudaStream_t s) {
  const int64_t o = ordinal_[static_cast<size_t>(i)];
  if (o >= 0)
    H3RT_CUDA_CHECK(cudaStreamWaitEvent(s, copied_[static_cast<size_t>(o) % slots_.size()], 0));
  return views_[static_cast<size_t>(i)];
}

void BlockWeightStream::release(int64_t i, cudaStream_t s) {
  const int64_t o = ordinal_[static_cast<size_t>(i)];
  if (o < 0) return;  // resident
  const size_t k = static_cast<size_t>(o) % slots_.size();
  const int64_t next = o + static_cast<int64_t>(slots_.size());
  const std::vector<int64_t>& b = streamed_->blocks;
  if (next >= static_cast<int64_t>(b.size()) || b[size_t(next)] >= last_)
    return;  // nothing left for this slot in the range
  H3RT_CUDA_CHECK(cudaEventRecord(done_[k], s));
  copy(next, done_[k]);
}

void BlockWeightStream::reset_timing() {
  timing_used_ = 0;
}

double BlockWeightStream::timed_ms(bool gather) const {
  double total = 0;
  for (size_t j = 0; j < timing_used_; ++j) {
    if (timing_[j].gather != gather) continue;
    float ms = 0;
    H3RT_CUDA_CHECK(cudaEventElapsedTime(&ms, timing_[j].begin, timing_[j].end));
    total += ms;
  }
  return total;
}

double BlockWeightStream::copy_ms() const {
  return timed_ms(false);
}

double BlockWeightStream::gather_ms() const {
  return timed_ms(true);
}

}  // namespace h3rt::model
