// defines: the two tables that open every run: the resolved settings (rank 0) and one ordered
//          row per rank (host, rank, local rank, device and, with GPUs, its PCI bus id), so a
//          wrong GPU binding shows at a glance.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "course/options.h"
#include "ddp/launch_env.h"

namespace ddp {
class ProcessGroup;
}  // namespace ddp

namespace ddpw {

// "key | value" table, printed by rank 0 only.
void print_settings(const Options& options, const ddp::LaunchEnv& launch, const torch::Device& device, int threads,
                    int global_rank);

// One row per rank gathered to rank 0 and printed in rank order (pg may be null: one row).
// `extra` adds columns (name, this rank's value), e.g. CUDA_VISIBLE_DEVICES for the diagnostics.
void print_rank_table(ddp::ProcessGroup* pg, const ddp::LaunchEnv& launch, const torch::Device& device,
                      const std::vector<std::pair<std::string, std::string>>& extra = {});

}  // namespace ddpw
