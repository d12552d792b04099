// defines: judge_gpu_sharing — may these ranks share GPUs? The decision ProcessGroup makes before
//          NCCL starts, and a program may print: from every rank's (host, PCI bus id), gathered over the
//          rendezvous store. The PCI bus id names the physical GPU whatever CUDA_VISIBLE_DEVICES
//          renumbers, so two tasks that each see "cuda:0" are told apart, and two that name the
//          same GPU are caught. NCCL needs one GPU per rank ("Duplicate GPU detected"); Gloo with
//          CUDA tensors copies through the host and works with any number of ranks per GPU.
//          Plain C++ (no LibTorch).
#pragma once

#include <string>
#include <vector>

namespace ddp {

// One rank's device, in rank order: its host, the PCI bus id of its GPU ("" on the CPU), and what
// tells machines of one host name apart (machine_id(), host.h: NCCL_HOSTID, else the kernel's boot
// id; "" when unknown). Ranks are on one machine when host and machine agree, as NCCL decides it:
// containers on several nodes may share a host name (a fixed --hostname, identical pod names).
struct GpuClaim {
  std::string host;
  std::string bus_id;
  std::string machine = "";  // (a default: {host, bus_id} alone is a claim too)
};

// One GPU that several ranks use.
struct SharedGpu {
  std::string host, bus_id;
  std::vector<int> ranks;
};

struct SharingVerdict {
  bool refused = false;
  std::string what, hint;  // the error, when refused
  std::string note;        // shared but fine (Gloo): one line worth printing, else ""
};

// The GPUs that more than one rank claims, in order of their first rank.
std::vector<SharedGpu> shared_gpus(const std::vector<GpuClaim>& claims);

// `backend`: "nccl" or "gloo" (already resolved from "auto").
SharingVerdict judge_gpu_sharing(const std::string& backend, const std::vector<GpuClaim>& claims);

// A compact list of ranks: {0, 1, 2, 5} -> "0-2,5".
std::string ranks_text(const std::vector<int>& ranks);

}  // namespace ddp
