// defines: expand_hostlist (Slurm's compressed node lists, e.g. "n[001-004],gpu7") and
//          expand_tasks_per_node (SLURM_TASKS_PER_NODE, e.g. "2(x3),1").
// Plain C++, no dependency on scontrol: compute nodes of some sites do not have it in PATH.
#pragma once

#include <string>
#include <vector>

namespace ddp {

// "a[1-2],b3" -> {"a1","a2","b3"}; "n[001-003]" keeps the zero padding; "r[1-2]n[1-2]" expands
// every bracket group; "n[1-2]-ib" keeps the suffix. Throws ddp::Error on malformed input.
std::vector<std::string> expand_hostlist(const std::string& hostlist);

// "2(x3),1" -> {2,2,2,1}. Throws ddp::Error on malformed input.
std::vector<int> expand_tasks_per_node(const std::string& tasks_per_node);

}  // namespace ddp
