// Communicator over Gloo (Debian's libgloo, the CPU collective engine of PyTorch's gloo
// backend), for processes started by hand: OpenMPI 4.1 cannot join independently started
// processes without an ompi-server. The processes meet through the rendezvous store
// (distribution/transports/rendezvous/store_client.h) and connect a full TCP mesh; each group created by split() is its own
// Gloo context, keyed in the store under its own prefix.
//
// It keeps the MPI backend's promises: before each collective the ranks compare its signature
// (operation, dtype, count) in a small all-gather, so a mismatch is an error naming what each
// rank issued; every operation has the group's deadline, and Gloo reports a dead peer as soon
// as its connection closes. A failure poisons the communicator: every later call throws.
#pragma once
#include <memory>
#include <string>

#include "distribution/runtime/communicator.h"
#include "distribution/transports/rendezvous/store_client.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace keras::distribution {

class GlooCommunicator : public Communicator {
 public:
  // Joins the group `prefix` of `size` processes as `rank`, listening on `host` (an address of
  // this machine that the others can reach). Collective over the group; `store` outlives it.
  GlooCommunicator(std::shared_ptr<KeyValueClient> store, const std::string& prefix,
                   const std::string& host, int rank, int size, std::string name);
  ~GlooCommunicator() override;

  void all_reduce(void* data, std::int64_t count, DType dtype, ReduceOperation operation) override;
  void all_gather(const void* send, void* receive, std::int64_t count, DType dtype) override;
  void reduce_scatter(const void* send, void* receive, std::int64_t count, DType dtype,
                      ReduceOperation operation) override;
  void broadcast(void* data, std::int64_t count, DType dtype, int root) override;
  void barrier() override;
  // Gloo's signature exchange is an all-gather of its own, a round trip across hosts: float
  // sums carry their signature instead where the caller can make room (communicator.h).
  bool signatures_ride_data() const override { return true; }
  std::shared_ptr<Communicator> split(int color, int key, const std::string& name) override;

  // The Gloo context underneath, for benchmarks that compare against raw Gloo on it.
  const std::shared_ptr<gloo::Context>& gloo_context() const { return context_; }

 private:
  template <typename Body>
  void guarded(const char* what, Body&& body);
  // An all-gather of every rank's signature.
  std::optional<std::vector<std::int64_t>> exchange_signatures(const Signature& mine,
                                                               const char* what) override;
  [[noreturn]] void fail(const std::string& message);
  std::uint32_t next_tag() { return tag_++; }

  std::shared_ptr<KeyValueClient> store_;
  std::string prefix_, host_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::uint32_t tag_ = 1;
  int splits_ = 0;
};

}  // namespace keras::distribution
