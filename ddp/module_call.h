// defines: ddp::call(module, args...) — a submodule's forward through a call site the library sees,
//          as PyTorch's Module.__call__ with its forward hooks (LibTorch's modules have none).
//   * ddp::call(block, x) is block->forward(x) (block: a ModuleHolder such as torch::nn::Linear,
//     a std::shared_ptr to a module, or the module itself), plus whatever interceptor is
//     registered for that module object. Without one it is a plain pass-through: a model whose
//     forward calls its blocks as `x = ddp::call(block, x)` trains the same in one process, under
//     DistributedDataParallel and under FullyShardedDataParallel (which registers one per unit:
//     gather the unit's parameters, run it, reshard them).
//   * An interceptor runs in place of the forward: it gets the module, the call's tensor
//     arguments and the forward as a function of them (to run once, or again later with other
//     tensors: activation checkpointing recomputes a unit in backward). It needs a forward that
//     returns one torch::Tensor; other forwards pass through, and an interceptor on one is an error.
//   * At most one interceptor per module object (CallInterception, RAII). The registry is
//     process-wide and thread-safe; a lookup is one mutex and one hash probe per call.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddp/error.h"

namespace ddp {

// The forward of one call as a function of its tensor arguments (same count and order as the call's
// torch::Tensor arguments; the other arguments are the call's own, kept by value).
using ModuleForward = std::function<torch::Tensor(const std::vector<torch::Tensor>& tensor_args)>;

// Runs in place of module.forward(args...): returns the call's output, normally
// forward(tensor_args) with the interceptor's work around it.
using CallInterceptor = std::function<torch::Tensor(
    torch::nn::Module& module, const std::vector<torch::Tensor>& tensor_args, const ModuleForward& forward)>;

// Registers `interceptor` for `module` while it lives. A second one on the same module is a
// ddp::Error (one owner per module: wrap a model once).
class CallInterception {
 public:
  CallInterception() = default;
  CallInterception(torch::nn::Module& module, CallInterceptor interceptor);
  ~CallInterception();
  CallInterception(CallInterception&& other) noexcept : module_(std::exchange(other.module_, nullptr)) {}
  CallInterception& operator=(CallInterception&& other) noexcept;
  CallInterception(const CallInterception&) = delete;
  CallInterception& operator=(const CallInterception&) = delete;

 private:
  const torch::nn::Module* module_ = nullptr;
};

namespace detail {

// The interceptor registered for `module`, or null.
std::shared_ptr<const CallInterceptor> find_call_interceptor(const torch::nn::Module& module);

template <typename T>
auto& module_impl(T& module) {
  if constexpr (requires { module.ptr(); }) {  // ModuleHolder (torch::nn::Linear, TORCH_MODULE(...))
    return *module.ptr();
  } else if constexpr (std::is_pointer_v<T> || requires { module.get(); *module; }) {  // Impl*, std::shared_ptr<Impl>
    return *module;
  } else {
    return module;  // the module itself
  }
}

template <typename... Args>
constexpr std::array<size_t, sizeof...(Args)> tensor_positions() {
  std::array<size_t, sizeof...(Args)> positions{};
  constexpr std::array<bool, sizeof...(Args)> is_tensor = {std::is_same_v<std::decay_t<Args>, torch::Tensor>...};
  size_t k = 0;
  for (size_t i = 0; i < sizeof...(Args); ++i) {
    positions[i] = k;
    if (is_tensor[i]) ++k;
  }
  return positions;
}

template <size_t I, size_t P, typename Tuple>
decltype(auto) pick_argument(Tuple& saved, const std::vector<torch::Tensor>& tensors) {
  if constexpr (std::is_same_v<std::tuple_element_t<I, Tuple>, torch::Tensor>) {
    return static_cast<const torch::Tensor&>(tensors[P]);
  } else {
    return static_cast<std::tuple_element_t<I, Tuple>&>(std::get<I>(saved));
  }
}

template <typename Impl, typename Tuple, size_t... I>
torch::Tensor forward_with(Impl& impl, Tuple& saved, const std::vector<torch::Tensor>& tensors,
                           std::index_sequence<I...>) {
  constexpr auto positions = []<typename... A>(std::tuple<A...>*) { return tensor_positions<A...>(); }(
      static_cast<Tuple*>(nullptr));
  (void)positions;
  return impl.forward(pick_argument<I, positions[I]>(saved, tensors)...);
}

}  // namespace detail

// module->forward(args...), through the interceptor registered for the module when there is one.
template <typename ModuleRef, typename... Args>
decltype(auto) call(ModuleRef&& module, Args&&... args) {
  auto& impl = detail::module_impl(module);
  using Result = decltype(impl.forward(std::forward<Args>(args)...));
  const auto interceptor = detail::find_call_interceptor(impl);
  if (!interceptor) return impl.forward(std::forward<Args>(args)...);
  if constexpr (!std::is_same_v<std::decay_t<Result>, torch::Tensor>) {
    throw Error("ddp::call: " + impl.name() + " has an interceptor (e.g. it is a FullyShardedDataParallel unit), " +
                    "but its forward does not return one torch::Tensor",
                "choose as units modules whose forward returns a torch::Tensor");
  } else {
    using Saved = std::tuple<std::decay_t<Args>...>;
    auto saved = std::make_shared<Saved>(std::forward<Args>(args)...);
    std::vector<torch::Tensor> tensor_args;
    std::apply(
        [&](auto&... a) {
          (
              [&](auto& x) {
                if constexpr (std::is_same_v<std::decay_t<decltype(x)>, torch::Tensor>) tensor_args.push_back(x);
              }(a),
              ...);
        },
        *saved);
    using Impl = std::remove_reference_t<decltype(impl)>;
    Impl* target = &impl;
    ModuleForward forward = [target, saved](const std::vector<torch::Tensor>& tensors) -> torch::Tensor {
      return detail::forward_with(*target, *saved, tensors, std::index_sequence_for<Args...>{});
    };
    return Result((*interceptor)(impl, tensor_args, forward));
  }
}

}  // namespace ddp
