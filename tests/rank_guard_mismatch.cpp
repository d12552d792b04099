// rank_guard_mismatch — the mistake the collective check (ddp/detail/collective_check.h) is for, in a
// program of its own under a real launcher: rank 0 alone broadcasts (a save left inside
// `if (rank == 0)`), while the other ranks go on to the next allreduce. faults.collective_mismatch
// runs it with and without TORCH_DISTRIBUTED_DEBUG=DETAIL.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "course/run_main.h"    // defines: run_main (one error line and exit code, as every program)
#include "ddp/launch_env.h"     // defines: resolve_launch_env, current_environment
#include "ddp/process.h"        // defines: configure_process
#include "ddp/process_group.h"  // defines: init_process_group, ProcessGroupOptions

int main() {
  return ddpw::run_main([] {
    ddp::configure_process();
    const ddp::LaunchEnv launch = ddp::resolve_launch_env(ddp::current_environment());
    ddp::ProcessGroupOptions options;
    options.rendezvous_timeout = std::chrono::seconds(60);
    options.collective_timeout = std::chrono::seconds(5);
    auto pg = ddp::init_process_group(launch, torch::kCPU, options);
    auto loss = torch::ones({1234});
    pg->allreduce_sum(loss, "loss");
    const auto start = std::chrono::steady_clock::now();
    try {
      if (launch.global_rank == 0) {  // the mistake: a collective only rank 0 calls
        std::vector<torch::Tensor> weights{torch::zeros({10})};
        pg->broadcast(weights, 0, "weights");
      }
      pg->allreduce_sum(loss, "loss");
    } catch (...) {  // how long the ranks were stuck: the test compares it with the collective timeout
      const std::chrono::duration<double> stuck = std::chrono::steady_clock::now() - start;
      std::fprintf(stderr, "rank %d stopped %.2f s after the mismatch\n", launch.global_rank, stuck.count());
      throw;
    }
    std::printf("rank %d finished\n", launch.global_rank);
    return 0;
  });
}
