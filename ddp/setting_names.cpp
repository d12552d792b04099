#include "ddp/setting_names.h"

#include <array>
#include <mutex>

namespace ddp {
namespace {

struct LibraryName {
  const char* name;
  const char* before;  // setting_value: before + value + after
  const char* after;
};

// In Setting's order.
constexpr std::array<LibraryName, static_cast<size_t>(Setting::kCount)> kLibraryNames{{
    {"the device", "device \"", "\""},
    {"ProcessGroupOptions::backend", "ProcessGroupOptions::backend = \"", "\""},
    {"ProcessGroupOptions::rendezvous_timeout", "ProcessGroupOptions::rendezvous_timeout = ", ""},
    {"ProcessGroupOptions::collective_timeout", "ProcessGroupOptions::collective_timeout = ", ""},
    {"LaunchOverrides::master_port", "LaunchOverrides::master_port = ", ""},
    {"Loader's batch_size", "Loader's batch_size = ", ""},
    {"workers_per_node's nproc", "workers_per_node's nproc = ", ""},
    {"thread_choice's requested count", "thread_choice's requested count = ", ""},
    {"snapshot", "snapshot path ", ""},
    {"no snapshot loaded", "no snapshot loaded", ""},
    {"ZeroOptions::stage", "ZeroOptions::stage = ", ""},
    {"export_weights", "export_weights path ", ""},
    {"CudaGraphStep", "CudaGraphStep ", ""},
}};

std::mutex registry_mutex;
std::array<std::string, static_cast<size_t>(Setting::kCount)> registered;  // "": the library's name

const LibraryName& library_name(Setting s) { return kLibraryNames.at(static_cast<size_t>(s)); }

std::string registered_name(Setting s) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  return registered.at(static_cast<size_t>(s));
}

}  // namespace

std::string setting_name(Setting s) {
  std::string name = registered_name(s);
  return name.empty() ? library_name(s).name : name;
}

std::string setting_value(Setting s, const std::string& value) {
  const std::string name = registered_name(s);
  if (!name.empty()) return value.empty() ? name : name + " " + value;
  const LibraryName& own = library_name(s);
  return own.before + value + own.after;
}

void set_setting_name(Setting s, const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  registered.at(static_cast<size_t>(s)) = name;
}

}  // namespace ddp
