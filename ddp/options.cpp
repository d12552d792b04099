#include "ddp/options.h"

#include "ddp/files.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <regex>

namespace ddp {
namespace {

[[noreturn]] void usage_error(const std::string& program, const std::string& what, const std::string& fix) {
  std::fprintf(stderr, "%s: error: %s (fix: %s)\n", program.c_str(), what.c_str(), fix.c_str());
  std::exit(2);
}

void check_writable_file(const std::string& program, const std::string& option, const std::string& path) {
  if (path.empty()) return;
  const std::string dir = parent_dir(path);
  if (!is_directory(dir))
    usage_error(program, option + " '" + path + "': folder '" + dir + "' does not exist",
                "create it (mkdir -p " + dir + ") or choose another path with " + option);
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    usage_error(program, option + " '" + path + "': folder '" + dir + "' is not writable",
                "choose a path in a folder you can write with " + option);
  if (is_directory(path))
    usage_error(program, option + " '" + path + "' is a folder, not a file", "name a file with " + option);
}

}  // namespace

Options parse_options(int argc, char** argv, const std::string& description, unsigned groups) {
  return parse_options(argc, argv, description, groups, {});
}

Options parse_options(int argc, char** argv, const std::string& description, unsigned groups,
                      const AddOptions& add_options) {
  Options o;
  const std::string program = base_name(argv[0]);
  CLI::App app{description, program};
  app.option_defaults()->always_capture_default();

  if (groups & kTrainingOptions) {
    app.add_option("total_epochs", o.total_epochs, "Epochs to train")
        ->required()->default_str("")->check(CLI::Range(1, 1000000));
    app.add_option("save_every", o.save_every, "Write a snapshot every N epochs")
        ->required()->default_str("")->check(CLI::Range(1, 1000000));
    app.add_option("--batch-size,--batch_size", o.batch_size, "Samples per step on each rank")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--device", o.device, "auto (CUDA if available, else CPU), cpu, cuda or cuda:N");
    app.add_option("--dataset", o.dataset, "Workload")
        ->check(CLI::IsMember({"synthetic", "mnist", "fashion-mnist"}));
    app.add_option("--data-dir", o.data_dir, "Folder with the four IDX files (.gz or not)");
    app.add_option("--test-batch-size", o.test_batch_size, "Samples per evaluation step")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--lr", o.lr, "Learning rate (0: the workload's default)")->check(CLI::Range(0.0, 1e6));
    app.add_option("--gamma", o.gamma, "Learning-rate decay per epoch (CNN)")->check(CLI::Range(0.0, 1.0));
    // CLI11 2.1 reads "-3" into the unsigned seed as 2^64-3 without a word: refuse a sign.
    app.add_option("--seed", o.seed, "Seed for data, weights and the sampler")
        ->check(CLI::Validator(
            [](std::string& v) { return v.find('-') == std::string::npos ? std::string() : "must be 0 or more, not " + v; },
            "UINT", "NonNegativeWholeNumber"));
    app.add_option("--threads", o.threads, "Intra-op threads per rank (0: cores / local ranks)")
        ->check(CLI::Range(0, 1024));
    app.add_option("--snapshot", o.snapshot_path, "Snapshot file (resumed from if it exists)");
    app.add_flag("--fresh", o.fresh, "Ignore an existing snapshot and start from epoch 0");
    app.add_option("--metrics", o.metrics_path, "Per-epoch metrics CSV, written by rank 0");
    app.add_option("--log-every", o.log_every, "Progress line every N steps (0: every 30 s)")
        ->check(CLI::Range(0, 1 << 30));
  }
  if (groups & kSpawnOptions)
    app.add_option("--nproc", o.nproc, "Workers to start when no GPU is visible (else one per GPU)")
        ->check(CLI::Range(1, 1024));
  if (groups & kDistributedOptions) {
    app.add_option("--master-addr", o.master_addr, "Rendezvous host (default: from the launcher)");
    app.add_option("--master-port", o.master_port, "Rendezvous port (default: from the launcher)")
        ->check(CLI::Range(0, 65535));
    app.add_option("--init-method", o.init_method, "file:///shared/path: rendezvous through a file");
    app.add_option("--backend", o.backend, "Process-group backend")->check(CLI::IsMember({"auto", "gloo", "nccl"}));
    app.add_option("--bucket-mb", o.bucket_mb, "Gradient bucket size in MiB")->check(CLI::Range(0.001, 4096.0));
    app.add_flag("--find-unused-parameters", o.find_unused_parameters,
                 "Treat parameters without a gradient as zero instead of stopping with an error");
    app.add_option("--rendezvous-timeout", o.rendezvous_timeout_s, "Seconds to wait for all ranks to arrive")
        ->check(CLI::Range(0.1, 86400.0));
    app.add_option("--collective-timeout", o.collective_timeout_s, "Seconds before a collective is declared hung")
        ->check(CLI::Range(0.1, 86400.0));
  }

  if (add_options) add_options(app, o);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    usage_error(program, e.what(), "see " + program + " --help");
  }

  static const std::regex device_form("auto|cpu|cuda|cuda:[0-9]+");
  if (!std::regex_match(o.device, device_form))
    usage_error(program, "--device '" + o.device + "' is not a device", "use auto, cpu, cuda or cuda:N");
  if ((groups & kDistributedOptions) && !o.init_method.empty() && o.init_method.rfind("file://", 0) != 0)
    usage_error(program, "--init-method '" + o.init_method + "' is not supported",
                "use file:///path/on/a/shared/filesystem, or leave it out for a TCP rendezvous");
  if (groups & kTrainingOptions) {
    check_writable_file(program, "--snapshot", o.snapshot_path);
    check_writable_file(program, "--metrics", o.metrics_path);
  }
  return o;
}

LaunchOverrides launch_overrides(const Options& o) {
  LaunchOverrides l;
  if (!o.master_addr.empty()) l.master_addr = o.master_addr;
  if (o.master_port > 0) l.master_port = o.master_port;
  if (!o.init_method.empty()) l.init_method = o.init_method;
  return l;
}

}  // namespace ddp
