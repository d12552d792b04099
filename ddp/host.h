// defines: host_name — this machine's name, as gethostname() gives it (the rank tables, error
//          prefixes and the GPU-sharing check name hosts by it); machine_id — what tells two
//          machines of one name apart.
#pragma once

#include <string>

namespace ddp {

std::string host_name();  // "" if gethostname fails

// What tells this machine from another of the same host name, as NCCL's host hash does: the
// environment's NCCL_HOSTID when set, else the kernel's boot id (/proc/sys/kernel/random/boot_id,
// new at every boot); "" if neither can be read.
std::string machine_id();

}  // namespace ddp
