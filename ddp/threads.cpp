#include "ddp/threads.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "ddp/setting_names.h"  // defines: setting_name, setting_value
#include "ddp/spawn.h"

namespace ddp {
namespace {

// A positive whole number from the environment, or 0 (unset, empty, or not a number).
int positive(const EnvMap& env, const char* key) {
  const auto it = env.find(key);
  if (it == env.end()) return 0;
  char* end = nullptr;
  const long v = std::strtol(it->second.c_str(), &end, 10);
  return end != it->second.c_str() && *end == '\0' && v > 0 && v < (1 << 20) ? static_cast<int>(v) : 0;
}

std::string cpus(int n) { return std::to_string(n) + (n == 1 ? " CPU" : " CPUs"); }

}  // namespace

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
}

ThreadChoice thread_choice(int requested, int local_world_size, const CpuFacts& facts, const EnvMap& env) {
  if (requested > 0) return {requested, setting_name(Setting::kThreads)};
  const int ranks = std::max(1, local_world_size);
  const std::string workers =
      ranks == 1 ? "1 rank" : std::to_string(ranks) + (facts.workers_share_task ? " workers" : " ranks");

  // The CPUs this rank may use: its mask, shared with the node's other ranks when they run on the
  // same mask (one task's workers, or nothing bound any rank: the mask is the whole machine).
  const bool shared = ranks > 1 && (facts.workers_share_task || facts.mask_cpus >= facts.online_cpus);
  int budget = std::max(1, shared ? facts.mask_cpus / ranks : facts.mask_cpus);
  std::string why = cpus(facts.mask_cpus) + " in the affinity mask" + (shared ? " / " + workers : "");

  // Slurm's share for the task, which the workers of one task divide among themselves.
  if (const int per_task = positive(env, "SLURM_CPUS_PER_TASK")) {
    const int cap = std::max(1, facts.workers_share_task ? per_task / ranks : per_task);
    if (cap < budget) {
      budget = cap;
      why = "SLURM_CPUS_PER_TASK=" + std::to_string(per_task) + (facts.workers_share_task ? " / " + workers : "");
    }
  }
  if (const int omp = positive(env, "OMP_NUM_THREADS")) {
    if (omp <= budget) return {omp, "OMP_NUM_THREADS"};
    return {budget, "OMP_NUM_THREADS=" + std::to_string(omp) + ", capped: " + why};
  }
  return {budget, why};
}

ThreadChoice thread_choice(int requested, int local_world_size) {
  CpuFacts facts;
  facts.mask_cpus = affinity_cpus();
  facts.online_cpus = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  // spawn()'s workers, and torchrun's (TORCHELASTIC_RUN_ID), are children of one task.
  facts.workers_share_task = is_spawned_worker() || std::getenv("TORCHELASTIC_RUN_ID") != nullptr;
  EnvMap env;
  for (const char* key : {"SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS"})
    if (const char* v = std::getenv(key)) env[key] = v;
  return thread_choice(requested, local_world_size, facts, env);
}

int choose_threads(int requested, int local_world_size) { return thread_choice(requested, local_world_size).count; }

}  // namespace ddp
