// defines: the checks `hello` runs before it joins the process group, so that a launch mistake
//          fails in seconds with the setting to fix instead of hanging in the first collective:
//          wait_for_master (a TCP connect to MASTER_ADDR:MASTER_PORT), check_master_is_here
//          and check_init_file; and idle_gpus_warning, for a launch that works but wastes GPUs.
//          Plain POSIX, no LibTorch.
#pragma once

#include <chrono>
#include <string>

#include "ddp/launch_env.h"

namespace diagnostics {

// Connects to launch.master_addr:master_port until it accepts, retrying while rank 0 has not
// started listening yet (connection refused, timeouts), for at most `timeout`. Returns the seconds
// it waited; throws ddp::Error naming host:port, the last reason and the likely fix. Rank 0 serves
// the rendezvous, so only the other ranks call this.
double wait_for_master(const ddp::LaunchEnv& launch, std::chrono::milliseconds timeout);

// For rank 0, which serves the rendezvous itself: MASTER_ADDR must be an address of this host
// (the other ranks look for the master there, and rank 0's own store client connects to it).
// Throws ddp::Error otherwise.
void check_master_is_here(const ddp::LaunchEnv& launch);

// For --init-method file:///path: the folder exists and this rank may create files in it.
void check_init_file(const std::string& init_method);

// Fewer ranks on a node than the GPUs each of them sees: the run works, but the other GPUs sit
// idle. Returns the warning (one line with the fix), or "" when every visible GPU has a rank.
// (More ranks than GPUs is an error, raised by ddp::choose_device.)
std::string idle_gpus_warning(int ranks_on_node, int visible_gpus);

}  // namespace diagnostics
