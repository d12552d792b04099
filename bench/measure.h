// defines: what the benchmarks measure with: resident_memory (this process's VmRSS and VmHWM),
//          median, gather (every rank's value, in rank order), bytes_of (a tensor's bytes, 0 if undefined).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "ddp/process_group.h"  // defines: ProcessGroup

namespace bench {

// This process's resident memory now and at its peak (VmRSS, VmHWM), in bytes.
inline std::pair<int64_t, int64_t> resident_memory() {
  std::ifstream in("/proc/self/status");
  int64_t now = 0, peak = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) now = std::stoll(line.substr(6)) * 1024;
    if (line.rfind("VmHWM:", 0) == 0) peak = std::stoll(line.substr(6)) * 1024;
  }
  return {now, peak};
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Every rank's values, in rank order (small vectors, through the process group).
inline std::vector<double> gather(ddp::ProcessGroup& pg, double mine) {
  auto all = torch::zeros({pg.size()}, torch::kFloat64);
  all[pg.rank()] = mine;
  auto on_device = all.to(pg.device());
  pg.allreduce_sum(on_device, "gathering the measurements");
  auto cpu = on_device.cpu();
  return std::vector<double>(cpu.data_ptr<double>(), cpu.data_ptr<double>() + pg.size());
}

inline int64_t bytes_of(const torch::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

}  // namespace bench
