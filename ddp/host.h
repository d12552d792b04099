// defines: host_name — this machine's name, as gethostname() gives it (the rank tables, error
//          prefixes and the GPU-sharing check name hosts by it).
#pragma once

#include <string>

namespace ddp {

std::string host_name();  // "" if gethostname fails

}  // namespace ddp
