// defines: ModuleImpl<M> (a LibTorch holder's module type: torch::nn::Sequential -> SequentialImpl,
//   TORCH_MODULE(Net) -> NetImpl; any other M is itself), WrappedModule, ModuleHolderType, HolderOf, ModuleHandle,
//   module_ptr(holder or shared_ptr). The wrappers (DistributedDataParallel, ZeroDataParallel) and
//   convert_sync_batchnorm accept a module the two ways LibTorch hands one out: a holder, or an ...Impl in a
//   std::shared_ptr.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <type_traits>

namespace ddp {

namespace detail {
template <typename M, typename = void>
struct IsModuleHolder : std::false_type {};
template <typename M>
struct IsModuleHolder<M, std::void_t<typename M::ContainedType>>
    : std::is_base_of<torch::nn::ModuleHolder<typename M::ContainedType>, M> {};
template <typename M>
struct IsModulePtr : std::false_type {};
template <typename T>
struct IsModulePtr<std::shared_ptr<T>> : std::is_base_of<torch::nn::Module, T> {};
}  // namespace detail

// A LibTorch module holder: torch::nn::Linear, torch::nn::Sequential, a TORCH_MODULE(Net).
template <typename M>
concept ModuleHolderType = detail::IsModuleHolder<M>::value;

namespace detail {
template <typename M>
struct ModuleImplOf {
  using type = M;
};
template <ModuleHolderType M>
struct ModuleImplOf<M> {
  using type = typename M::ContainedType;
};
}  // namespace detail

// The module a wrapper holds: the holder's ...Impl, or M itself.
template <typename M>
using ModuleImpl = typename detail::ModuleImplOf<std::remove_cvref_t<M>>::type;

// A holder of the module type Impl (a wrapper of Impl takes it as well as its shared_ptr).
template <typename H, typename Impl>
concept HolderOf = ModuleHolderType<H> && std::is_same_v<ModuleImpl<H>, Impl>;

// A module as LibTorch hands it out: a holder, or an ...Impl's std::shared_ptr.
template <typename M>
concept ModuleHandle = ModuleHolderType<M> || detail::IsModulePtr<M>::value;

namespace detail {
// What a wrapper of a type that is no module holds, so that check_module_type's line is its only error.
struct NotAModule : torch::nn::Module {
  template <typename... Args>
  torch::Tensor forward(Args&&...) {
    return {};
  }
};
}  // namespace detail

// The module a wrapper of M holds: ModuleImpl<M>, or a stand-in when M is no module (and
// check_module_type<M>() has failed).
template <typename M>
using WrappedModule =
    std::conditional_t<std::is_base_of_v<torch::nn::Module, ModuleImpl<M>>, ModuleImpl<M>, detail::NotAModule>;

// One line for every wrong M, instead of a page of template errors.
template <typename M>
inline constexpr bool check_module_type() {
  static_assert(std::is_base_of_v<torch::nn::Module, ModuleImpl<M>>,
                "ddp: M must be a torch::nn::Module: an ...Impl (held by std::shared_ptr<NetImpl>) or its "
                "holder (torch::nn::Sequential, a TORCH_MODULE(Net)); pass net or net.ptr()");
  return true;
}

// The shared pointer a wrapper keeps: holder.ptr(), or the shared_ptr itself.
template <ModuleHolderType H>
std::shared_ptr<typename H::ContainedType> module_ptr(const H& holder) {
  return holder.ptr();
}
template <typename M>
std::shared_ptr<M> module_ptr(std::shared_ptr<M> module) {
  return module;
}

}  // namespace ddp
