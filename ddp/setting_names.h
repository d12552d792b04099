// defines: Setting, setting_name, setting_value, set_setting_name — how the library's error hints
//          name a setting the user changes: in the library's own words (an option struct's field, a
//          function's argument) unless the program on top registers how ITS users set it (a
//          command-line flag, a config key), once at start-up.
#pragma once

#include <string>

namespace ddp {

// The settings the library's hints tell a user to change.
enum class Setting {
  kDevice,             // the device asked of choose_device: "cpu", "cuda", "cuda:N"
  kBackend,            // ProcessGroupOptions::backend
  kRendezvousTimeout,  // ProcessGroupOptions::rendezvous_timeout
  kCollectiveTimeout,  // ProcessGroupOptions::collective_timeout
  kMasterPort,         // LaunchOverrides::master_port
  kBatchSize,          // Loader's batch_size
  kWorkers,            // workers_per_node's nproc: CPU workers when no GPU is used
  kThreads,            // thread_choice's requested thread count
  kSnapshotPath,       // the path save_snapshot / save_sharded_snapshot write
  kFreshStart,         // a run that does not load its snapshot, and so starts over
  kZeroStage,          // ZeroOptions::stage
  kExportWeightsPath,  // the path export_weights writes
  kCudaGraph,          // training through a CudaGraphStep (a switch: its name alone)
  kCount
};

// The setting's name in messages: the registered one, else the library's (e.g.
// "ProcessGroupOptions::collective_timeout").
std::string setting_name(Setting s);

// The setting with a value, as a user writes it: registered names are followed by the value
// ("--my-backend gloo"); the library's own forms read as code (ProcessGroupOptions::backend = "gloo").
std::string setting_value(Setting s, const std::string& value);

// From now on messages name `s` as `name` (e.g. a program's flag, "--my-timeout"); "" restores the library's
// name. Thread-safe; meant for start-up, before the first message is built.
void set_setting_name(Setting s, const std::string& name);

}  // namespace ddp
