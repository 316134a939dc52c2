// A process group that serves the emulated GPU (gpu_emulation.h) by running a host
// group's collectives on its memory, which is host memory: what NCCL is to a real GPU. Installed
// as gpu_world() (distribution::ScopedGpuWorldOverride), it lets multi-process tests without a
// GPU check the plumbing NCCL relies on: that each host group's GPU twin is found, split per mesh
// axis, and used for every tensor on the GPU, and that training keeps its tensors there. What
// it cannot check is NCCL itself (streams, events, the watchdog): tests/nccl/ does, on GPUs.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distribution/runtime/communicator.h"
#include "tests/gpu_emulation/gpu_emulation.h"

namespace keras::testing {

class EmulatedGpuGroup final : public distribution::Communicator {
 public:
  explicit EmulatedGpuGroup(std::shared_ptr<distribution::Communicator> host)
      : Communicator("emulated GPUs of " + host->name(), host->rank(), host->size()),
        host_(std::move(host)) {}
  bool accepts(Device device) const override {
    return gpu_emulation_active() && device == Device::gpu(0);
  }
  void all_reduce(void* data, std::int64_t count, DType dtype,
                  distribution::ReduceOperation operation) override {
    ++served;
    host_->all_reduce(data, count, dtype, operation);
  }
  void all_gather(const void* send, void* receive, std::int64_t count, DType dtype) override {
    ++served;
    host_->all_gather(send, receive, count, dtype);
  }
  void reduce_scatter(const void* send, void* receive, std::int64_t count, DType dtype,
                      distribution::ReduceOperation operation) override {
    ++served;
    host_->reduce_scatter(send, receive, count, dtype, operation);
  }
  void broadcast(void* data, std::int64_t count, DType dtype, int root) override {
    ++served;
    host_->broadcast(data, count, dtype, root);
  }
  void barrier() override { host_->barrier(); }
  std::shared_ptr<distribution::Communicator> split(int color, int key,
                                                    const std::string& name) override {
    std::shared_ptr<distribution::Communicator> host_split = host_->split(color, key, name);
    if (!host_split) return nullptr;
    return std::make_shared<EmulatedGpuGroup>(std::move(host_split));
  }
  // As NCCL's groups: the host group leaves for both.
  void leave() override {}

  // Collectives run by every such group of this process so far.
  static inline std::int64_t served = 0;

 private:
  // The host group checks every collective it runs for this one.
  std::optional<std::vector<std::int64_t>> exchange_signatures(const Signature&, const char*) override {
    return std::nullopt;
  }
  std::shared_ptr<distribution::Communicator> host_;
};

}  // namespace keras::testing
