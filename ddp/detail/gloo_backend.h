// defines: make_gloo_backend — c10d's Gloo backend, for ranks on the CPU. A build without Gloo's
//          headers (a login node without libgloo-dev: NCCL only) compiles no_gloo_backend.cpp
//          instead, whose make_gloo_backend stops with the fix.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

namespace ddp {

// Gloo for `rank` of `size` over `store`: joining waits at most the rendezvous timeout, each
// collective the collective timeout. It talks over GLOO_SOCKET_IFNAME's interface if set, else
// loopback when the master is on this host, else the interface of this host's name.
// (Plain arguments, not ProcessGroupOptions: process_group.cpp calls it, so this header stays below it.)
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                    bool master_is_local, std::chrono::milliseconds rendezvous_timeout,
                                                    std::chrono::milliseconds collective_timeout);

}  // namespace ddp
