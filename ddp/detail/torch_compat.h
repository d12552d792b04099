// defines: what differs between the LibTorch versions the library builds with (torch 2.10 to
// 2.15, cmake/LibTorch.cmake's window), in one place: each difference is named by the PyTorch
// change and the release it came in, and the code elsewhere uses the names below, never a
// version test of its own. A new release that breaks the build adds its entry here.
#pragma once

#include <torch/version.h>  // TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR

#include <memory>

#include <c10/util/intrusive_ptr.h>

namespace torch::autograd {
struct Node;
}

// DDPW_TORCH_AT_LEAST(2, 13): this LibTorch is torch 2.13 or newer.
#define DDPW_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace ddp::detail::torch_compat {

// An owning pointer to a node of the autograd graph (what torch::autograd::impl::grad_accumulator
// returns). torch 2.13: std::shared_ptr<Node> became c10::intrusive_ptr<Node> throughout autograd
// (pytorch/pytorch#181782, "[autograd] Convert shared_ptr<Node> to intrusive_ptr<Node>").
#if DDPW_TORCH_AT_LEAST(2, 13)
using NodePtr = c10::intrusive_ptr<torch::autograd::Node>;
#else
using NodePtr = std::shared_ptr<torch::autograd::Node>;
#endif

}  // namespace ddp::detail::torch_compat
