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

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const auto device = inner.device();
    auto* held = new Held{std::move(inner), static_cast<int64_t>(n), this};
    const int64_t now = current_.fetch_add(held->bytes) + held->bytes;
    for (int64_t seen = peak_.load(); now > seen && !peak_.compare_exchange_weak(seen, now);) {
    }
    return {data, held, &Held::release, device};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  struct Held {
    c10::DataPtr inner;
    int64_t bytes;
    HostAllocations* owner;
    static void release(void* p) {
      auto* h = static_cast<Held*>(p);
      h->owner->current_.fetch_sub(h->bytes);
      delete h;
    }
  };
  HostAllocations() : inner_(c10::GetCPUAllocator()) { c10::SetCPUAllocator(this, /*priority=*/200); }

  c10::Allocator* inner_;
  std::atomic<int64_t> current_{0}, peak_{0};
};

}  // namespace ddp_test
