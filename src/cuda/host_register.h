// Host memory registered with CUDA in place (cudaHostRegister), owned: copies from it run as
// from pinned memory (DMA, stream-ordered, capturable) without a copy into a pinned buffer
// first. Read-only memory (a checkpoint mapped PROT_READ) is registered read-only where the
// device supports it. Registration locks the pages in host memory until it is undone.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/host_ranges.h"

namespace h3rt::cuda {

class HostRegistration {
 public:
  // Every range registered (ranges that start in memory already pinned are left as they are),
  // or none: nullptr, and `why` says which range failed and how (the caller falls back to
  // copying). `ranges` are page-aligned and disjoint (page_ranges).
  static std::unique_ptr<HostRegistration> make(const std::vector<HostRange>& ranges,
                                                std::string& why);
  ~HostRegistration();
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  int64_t bytes() const { return bytes_; }

 private:
  HostRegistration() = default;
  std::vector<void*> registered_;
  int64_t bytes_ = 0;
};

}  // namespace h3rt::cuda
