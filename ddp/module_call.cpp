#include "ddp/module_call.h"

#include <mutex>
#include <unordered_map>

namespace ddp {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<const torch::nn::Module*, std::shared_ptr<const CallInterceptor>> interceptors;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: modules may outlive static destruction order
  return *r;
}

}  // namespace

CallInterception::CallInterception(torch::nn::Module& module, CallInterceptor interceptor) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const bool inserted =
      r.interceptors.emplace(&module, std::make_shared<const CallInterceptor>(std::move(interceptor))).second;
  if (!inserted)
    throw Error("ddp::call: " + module.name() + " already has an interceptor (it is wrapped already)",
                "wrap each module once: destroy the first wrapper before wrapping it again");
  module_ = &module;
}

CallInterception::~CallInterception() {
  if (!module_) return;
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.interceptors.erase(module_);
}

CallInterception& CallInterception::operator=(CallInterception&& other) noexcept {
  if (this != &other) {
    CallInterception gone(std::move(*this));
    module_ = std::exchange(other.module_, nullptr);
  }
  return *this;
}

namespace detail {

std::shared_ptr<const CallInterceptor> find_call_interceptor(const torch::nn::Module& module) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.interceptors.find(&module);
  return it == r.interceptors.end() ? nullptr : it->second;
}

}  // namespace detail
}  // namespace ddp
