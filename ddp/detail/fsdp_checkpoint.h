// defines: checkpointed_call — FSDP's activation checkpointing of one unit call: the forward runs
//          without keeping its activations; in backward the unit is gathered again (before_backward),
//          its forward rerun with autograd on and backpropagated through, which fills the parameters'
//          gradients (and runs their gradient-ready hooks). The rerun happens under the autocast state
//          the forward ran under (as torch.utils.checkpoint re-enters it), so the gradients equal the
//          run without checkpointing under autocast too. Needs a deterministic unit forward (no dropout).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "ddp/module_call.h"  // defines: ModuleForward

namespace ddp::detail {

// `anchor`: a tensor that requires grad, passed along so that the unit's backward runs even when
// none of `args` requires grad (the first unit's input).
torch::Tensor checkpointed_call(const ModuleForward& forward, const std::vector<torch::Tensor>& args,
                                const torch::Tensor& anchor, std::function<void()> before_backward);

}  // namespace ddp::detail
