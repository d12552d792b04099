// defines: Autocast — torch.autocast for C++: while it lives, LibTorch's autocast (at::autocast)
//          runs the ops of its list in a lower precision (bfloat16 or float16) on one device type,
//          the parameters staying float32. What Python's `with torch.autocast(device_type, dtype):`
//          does on entry and exit, call for call (torch/amp/autocast_mode.py, torch 2.11):
//            enter: remember the enabled flag and dtype of the device type and the cache flag; set
//                   them; raise the nesting level;
//            exit:  lower the nesting level and, back outside every autocast, clear the cast cache
//                   (the float32 weights' low-precision copies, kept while a forward runs); restore.
//          Nesting works as in Python: an inner Autocast{.enabled = false} turns it off for its scope.
//
//   {
//     ddp::Autocast amp({.device_type = torch::kCUDA, .dtype = torch::kBFloat16});
//     loss = loss_fn(model(x), y);            // matmuls and convolutions in bfloat16
//   }
//   loss.backward();                           // outside: as PyTorch recommends
#pragma once

#include <torch/torch.h>

#include <string>

namespace ddp {

struct AutocastOptions {
  torch::DeviceType device_type = torch::kCUDA;  // the autocast of this device type (kCPU, kCUDA)
  torch::ScalarType dtype = torch::kBFloat16;    // kBFloat16 or kHalf (PyTorch's only two)
  bool enabled = true;                           // false: autocast off inside (nested in an enabled one)
  bool cache_enabled = true;                     // keep low-precision weight copies while it lives
};

class Autocast {
 public:
  // A dtype other than bfloat16/float16, or a device type without autocast, is a ddp::Error
  // (Python warns and disables; a C++ program asked for it explicitly).
  explicit Autocast(const AutocastOptions& options);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  torch::DeviceType device_type_;
  bool previous_enabled_;
  torch::ScalarType previous_dtype_;
  bool previous_cache_enabled_;
};

// "bf16" -> kBFloat16, "fp16" -> kHalf (the spellings of DeepSpeed's and Lightning's configs).
torch::ScalarType autocast_dtype(const std::string& precision);

}  // namespace ddp
