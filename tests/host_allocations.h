// defines: HostAllocations — the bytes LibTorch's CPU allocator hands out in this process, now and at
//          the most since reset_peak(): the CPU allocator wrapped (c10::SetCPUAllocator), each
//          allocation counted until its tensor's memory goes. Exact where the resident set is not (malloc
//          keeps freed memory). For the tests' and the benchmark's memory bounds on the host.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace ddp_test {

class HostAllocations final : public c10::Allocator {
 public:
  // Installed once per process, for the rest of it (earlier tensors are not counted).
  static HostAllocations& install() {
    static auto* counter = new HostAllocations();  // never destroyed: tensors may outlive main
    return *counter;
  }
  int64_t current() const { return current_.load(); }
  int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(current_.load()); }

  // The DataPtr's context is its data pointer (as LibTorch's own CPU allocator's), so that raw_allocate
  // and raw_deleter work too: oneDNN (ideep) takes its buffers through them, e.g. in gelu.
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const auto device = inner.device();
    const auto bytes = static_cast<int64_t>(n);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      held_.emplace(data, Held{std::move(inner), bytes});
    }
    const int64_t now = current_.fetch_add(bytes) + bytes;
    for (int64_t seen = peak_.load(); now > seen && !peak_.compare_exchange_weak(seen, now);) {
    }
    return {data, data, &release, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

 private:
  struct Held {
    c10::DataPtr inner;
    int64_t bytes;
  };
  static void release(void* data) {
    auto& self = install();
    c10::DataPtr inner;  // freed after the lock is released
    {
      std::lock_guard<std::mutex> lock(self.mutex_);
      const auto it = self.held_.find(data);
      if (it == self.held_.end()) return;  // n == 0 (no data) or not ours
      self.current_.fetch_sub(it->second.bytes);
      inner = std::move(it->second.inner);
      self.held_.erase(it);
    }
  }
  HostAllocations() : inner_(c10::GetCPUAllocator()) { c10::SetCPUAllocator(this, /*priority=*/200); }

  c10::Allocator* inner_;
  std::atomic<int64_t> current_{0}, peak_{0};
  std::mutex mutex_;
  std::unordered_map<void*, Held> held_;  // by data pointer
};

}  // namespace ddp_test
