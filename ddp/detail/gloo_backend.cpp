#include "ddp/detail/gloo_backend.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdlib>

namespace ddp {

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                    bool master_is_local, std::chrono::milliseconds rendezvous_timeout,
                                                    std::chrono::milliseconds collective_timeout) {
  using c10d::ProcessGroupGloo;
  // Gloo waits with its options' timeout while joining and with setTimeout's afterwards. Joining
  // waits with the rendezvous timeout (Gloo's default would be the collective one, and five times
  // that for a peer that published its address but never connects).
  auto gloo = ProcessGroupGloo::Options::create(rendezvous_timeout);
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
    gloo->devices.push_back(ProcessGroupGloo::createDeviceForInterface(ifname));
  else if (master_is_local)
    gloo->devices.push_back(ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else
    gloo->devices.push_back(ProcessGroupGloo::createDefaultDevice());
  auto backend = c10::make_intrusive<ProcessGroupGloo>(store, rank, size, gloo);
  backend->setTimeout(collective_timeout);  // every collective from now on
  return backend;
}

}  // namespace ddp
