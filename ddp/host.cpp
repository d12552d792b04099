#include "ddp/host.h"

#include <unistd.h>

namespace ddp {

std::string host_name() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace ddp
