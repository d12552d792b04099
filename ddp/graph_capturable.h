// defines: GraphCapturable — what an optimizer offers so that its step can be captured in a CUDA
//          graph and replayed (CudaGraphStep, cuda_graph_step.h): the learning rate read from a
//          0-dim tensor on the parameters' device rather than baked into the kernels as a host
//          scalar (PyTorch's capturable=True), and the host-side step counts kept true across replays.
#pragma once

namespace ddp {

class GraphCapturable {
 public:
  virtual ~GraphCapturable() = default;
  // From now on step() reads each group's learning rate from a 0-dim tensor on the parameters'
  // device (made here from the group's lr). Call it before the first step that is captured; the
  // eager steps after it run the same kernels, so a replay and an eager step compute alike.
  virtual void make_capturable() = 0;
  bool capturable() const { return capturable_; }
  // Copies each group's learning rate that changed on the host (set_lr, a schedule) into its device
  // tensor: one fill kernel per changed group, no host synchronization. step() does it too; a graph
  // replays no host code, so call it before each replay.
  virtual void update_device_lr() = 0;
  // A replay ran one more step than step() saw: counts it where the optimizer counts steps.
  virtual void count_replayed_step() = 0;

 protected:
  bool capturable_ = false;
};

}  // namespace ddp
