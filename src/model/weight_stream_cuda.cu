// Block weight streaming (see weight_stream_cuda.h).
#include <cuda_runtime.h>

#include <cstring>

#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "h3rt/memory.h"
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

// Block `i`'s image of `bytes` in page-locked host memory (`blocks` of them in all).
std::shared_ptr<void> pinned(size_t bytes, size_t i, size_t blocks) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    H3RT_FAIL("weight streaming (device_memory_limit): cannot pin ", bytes / 1e9,
              " GB of host memory for block ", i, "'s weights (", bytes * blocks / 1e9,
              " GB for all ", blocks, " blocks): ", cudaGetErrorString(err),
              "; the streamed weights need that much free host memory");
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

BlockImageWriter::BlockImageWriter(const SlotLayout& layout, size_t blocks)
    : st_(std::make_shared<StreamedBlocks>()), written_(blocks, false) {
  const MemoryScope scope("the pinned host copies of the streamed block weights");
  st_->layout = layout;
  for (size_t i = 0; i < blocks; ++i)
    st_->images.push_back(pinned(static_cast<size_t>(layout.bytes), i, blocks));
}

void BlockImageWriter::write(size_t i, DeviceBlock& b) {
  H3RT_CHECK(i < written_.size() && !written_[i], "BlockImageWriter: block ", i,
             " out of range or written twice");
  H3RT_CHECK(same_layout(block_slot_layout(b), st_->layout), "block ", i, " (blocks.", i,
             ".*) stores its linears in other formats or shapes than the streamed layout (",
             st_->layout.bytes,
             " bytes per block, from block 0's formats); weight streaming "
             "(device_memory_limit) needs one layout for every block");
  const SlotLayout& layout = st_->layout;
  const std::shared_ptr<void>& image = st_->images[i];
  char* base = static_cast<char*>(image.get());
  auto tensors = streamed_tensors(b);
  for (const auto& [name, t] : tensors)  // whatever wrote them (kernels on other streams)
    if (t->device() == Device::cuda) {
      H3RT_CUDA_CHECK(cudaDeviceSynchronize());
      break;
    }
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
  written_[i] = true;
}

std::shared_ptr<const StreamedBlocks> BlockImageWriter::finish() {
  for (size_t i = 0; i < written_.size(); ++i)
    H3RT_CHECK(written_[i], "BlockImageWriter: block ", i, " was never written");
  return st_;
}

void stream_block_weights(DeviceModel& m) {
  if (m.streamed || m.blocks.empty()) return;
  const SlotLayout layout = block_slot_layout(m.blocks[0]);
  for (size_t i = 0; i < m.blocks.size(); ++i)
    H3RT_CHECK(same_layout(block_slot_layout(m.blocks[i]), layout), "block ", i, " (blocks.", i,
               ".*) stores its linears in other formats or shapes than block 0; "
               "weight streaming (device_memory_limit) needs one layout for every block");
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());     // whatever wrote the weights (other streams)
  BlockImageWriter w(layout, m.blocks.size());  // pins all first: a failure leaves m as it was
  for (size_t i = 0; i < m.blocks.size(); ++i) w.write(i, m.blocks[i]);
  m.streamed = w.finish();
  cuda::default_arena().release_cached();  // the freed blocks go back to the driver
}

WeightStreamPlan apply_weight_streaming(DeviceModel& m, const SequenceLayout& layout, int64_t limit,
                                        bool sage) {
  H3RT_CHECK(!m.blocks.empty(), "weight streaming: the model has no transformer blocks");
  WeightStreamInput w;
  w.limit = limit;
  w.weight_bytes = model_weight_bytes(m);
  w.slot_bytes = m.streamed ? m.streamed->layout.bytes : block_slot_layout(m.blocks[0]).bytes;
  w.blocks = static_cast<int64_t>(m.blocks.size());
  w.working_set_bytes =
      estimate_working_set_bytes(m.config, block_storage(m.blocks[0]), sage, forward_shape(layout));
  w.streamed = m.streamed != nullptr;
  const WeightStreamPlan p = plan_weight_streaming(w);
  H3RT_CHECK(!p.stream || m.streamed || m.caller_block_bytes == 0, "device_memory_limit ",
             limit / 1e9, " GB: this request needs the block weights streamed (",
             p.device_bytes / 1e9, " GB on the device streamed, ",
             (w.weight_bytes + w.working_set_bytes) / 1e9, " GB resident), but ",
             m.caller_block_bytes / 1e9,
             " GB of them are the caller's CUDA tensors, used in place: streaming would copy them "
             "to host memory and free none of their device memory. Pass the state dict as CPU "
             "tensors (h3rt then streams them from pinned host memory), or raise the limit");
  if (p.stream) stream_block_weights(m);
  return p;
}

BlockWeightStream::BlockWeightStream(const DeviceModel& m, int slots) : m_(m) {
  H3RT_CHECK(m.streamed, "BlockWeightStream: the model's blocks do not stream");
  H3RT_CHECK(slots >= 2, "BlockWeightStream: needs >= 2 slots, got ", slots);
  const MemoryScope scope("the device slots of the streamed block weights");
  layout_ = m.streamed->layout;
  for (int k = 0; k < slots; ++k) slots_.push_back(cuda::device_empty(DType::u8, {layout_.bytes}));
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    views_.push_back(m.blocks[i]);
    char* base = static_cast<char*>(slots_[i % slots].data());
    auto tensors = streamed_tensors(views_.back());
    for (size_t k = 0; k < tensors.size(); ++k) {
      Tensor& t = *tensors[k].second;
      t = Tensor(base + layout_.entries[k].offset, t.dtype(), t.shape(), nullptr, Device::cuda);
    }
  }
  H3RT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  H3RT_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  copied_.resize(slots);
  done_.resize(slots);
  for (int k = 0; k < slots; ++k) {
    H3RT_CUDA_CHECK(cudaEventCreateWithFlags(&copied_[k], cudaEventDisableTiming));
    H3RT_CUDA_CHECK(cudaEventCreateWithFlags(&done_[k], cudaEventDisableTiming));
  }
}

BlockWeightStream::~BlockWeightStream() {
  if (copy_) cudaStreamSynchronize(copy_);
  for (auto* list : {&copied_, &done_})
    for (cudaEvent_t e : *list) cudaEventDestroy(e);
  for (auto& [a, b] : timing_) {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  if (fork_) cudaEventDestroy(fork_);
  if (copy_) cudaStreamDestroy(copy_);
}

void BlockWeightStream::copy(int64_t block) {
  const size_t k = static_cast<size_t>(block) % slots_.size();
  if (timed_) {
    if (timing_used_ == timing_.size()) {
      cudaEvent_t a, b;
      H3RT_CUDA_CHECK(cudaEventCreate(&a));
      H3RT_CUDA_CHECK(cudaEventCreate(&b));
      timing_.push_back({a, b});
    }
    H3RT_CUDA_CHECK(cudaEventRecord(timing_[timing_used_].first, copy_));
  }
  H3RT_CUDA_CHECK(cudaMemcpyAsync(slots_[k].data(), m_.streamed->images[block].get(), layout_.bytes,
                                  cudaMemcpyHostToDevice, copy_));
  if (timed_) H3RT_CUDA_CHECK(cudaEventRecord(timing_[timing_used_++].second, copy_));
  H3RT_CUDA_CHECK(cudaEventRecord(copied_[k], copy_));
}

void BlockWeightStream::begin(int64_t first, int64_t last, cudaStream_t s, bool timed) {
  H3RT_CHECK(first >= 0 && first <= last && last <= static_cast<int64_t>(views_.size()),
             "BlockWeightStream: blocks [", first, ", ", last, ") out of range");
  last_ = last;
  timed_ = timed;
  if (first == last) return;
  H3RT_CUDA_CHECK(cudaEventRecord(fork_, s));
  H3RT_CUDA_CHECK(cudaStreamWaitEvent(copy_, fork_, 0));
  const int64_t n = static_cast<int64_t>(slots_.size());
  for (int64_t j = first; j < std::min(first + n, last); ++j) copy(j);
}

const DeviceBlock& BlockWeightStream::acquire(int64_t i, cudaStream_t s) {
  H3RT_CUDA_CHECK(cudaStreamWaitEvent(s, copied_[static_cast<size_t>(i) % slots_.size()], 0));
  return views_[static_cast<size_t>(i)];
}

void BlockWeightStream::release(int64_t i, cudaStream_t s) {
  const size_t k = static_cast<size_t>(i) % slots_.size();
  const int64_t next = i + static_cast<int64_t>(slots_.size());
  if (next >= last_) return;  // nothing left for this slot in the range
  H3RT_CUDA_CHECK(cudaEventRecord(done_[k], s));
  H3RT_CUDA_CHECK(cudaStreamWaitEvent(copy_, done_[k], 0));
  copy(next);
}

void BlockWeightStream::reset_timing() {
  timing_used_ = 0;
}

double BlockWeightStream::copy_ms() const {
  double total = 0;
  for (size_t j = 0; j < timing_used_; ++j) {
    float ms = 0;
    H3RT_CUDA_CHECK(cudaEventElapsedTime(&ms, timing_[j].first, timing_[j].second));
    total += ms;
  }
  return total;
}

}  // namespace h3rt::model
