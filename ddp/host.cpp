#include "ddp/host.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace ddp {

std::string host_name() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

std::string machine_id() {
  if (const char* id = std::getenv("NCCL_HOSTID"); id && *id) return std::string("NCCL_HOSTID=") + id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(in, boot);
  return boot;
}

}  // namespace ddp
