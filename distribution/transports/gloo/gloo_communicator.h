// Communicator over Gloo (Debian's libgloo, the CPU collective engine of PyTorch's gloo
// backend), for processes started by hand: OpenMPI 4.1 cannot join independently started
// processes without an ompi-server. The processes meet through the rendezvous store
// (distribution/transports/rendezvous/store_client.h) and connect a full TCP mesh; each group created by split() is its own
// Gloo context, keyed in the store under its own prefix.
//
// It keeps the MPI backend's promises: before each collective the ranks compare its signature
// (operation, dtype, count) in a small all-gather (between two processes, an exchange, which
// an all_reduce sends ahead of its values instead of waiting for it), so a mismatch is an error
// naming what each rank issued; every operation has the group's deadline, and Gloo reports a dead peer as soon
// as its connection closes. A failure poisons the communicator: every later call throws.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distribution/runtime/communicator.h"
#include "distribution/transports/rendezvous/store_client.h"

namespace gloo {
class Context;
namespace transport {
class Device;
class UnboundBuffer;
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
  // all_reduce between two processes: each sends its signature and its values to the other,
  // checks the other's signature and adds the other's values. Gloo sends a buffer only once
  // the receiver has posted its receive (its rendezvous costs a trip each way), so the
  // receives of the next exchange are posted at the end of each one: the signature (fixed
  // size) and the values into a buffer as large as the largest exchange so far, a size both
  // sides know. The values then go at once, one trip of latency where Gloo's ring takes two
  // phases of rendezvous and the signature all-gather before it more: across hosts 1 ms apart
  // each way a data-parallel step paid about 2 ms instead of 6 (benchmarks/network_epoch.py).
  // The bytes are the ring's (each sends the buffer once); addition commutes, so both sides
  // get the same bits. Values larger than the posted receive go through a receive posted after
  // the signatures agree, so that a peer's larger buffer never meets a smaller receive (Gloo
  // aborts the process on that).
  void exchange_and_reduce(void* data, std::int64_t count, DType dtype, std::int64_t code,
                           const std::function<void(void*, const void*, const void*, size_t)>& reduce);
  // Sends this rank's signature on the next signature slot and returns the peer's, from the
  // receive posted ahead (which it posts again for the next one). Two processes only.
  Signature peer_signature_for(const Signature& mine);
  // Each posted once per exchange, ahead of it, on the slot of the next signature or values.
  void post_signature_receive();
  void post_values_receive();
  std::uint32_t next_tag() { return tag_++; }

  std::shared_ptr<KeyValueClient> store_;
  std::string prefix_, host_;
  std::shared_ptr<gloo::transport::Device> device_;
  // Two processes (exchange_and_reduce): the buffers the receives posted ahead write into,
  // declared before the receives' handles and the context so that those go first.
  std::vector<char> peer_values_;
  std::size_t posted_capacity_ = 0;
  Signature own_signature_{}, peer_signature_{};
  std::uint32_t signature_sequence_ = 0, exchange_sequence_ = 0;
  std::unique_ptr<gloo::transport::UnboundBuffer> signature_in_, values_in_;
  std::shared_ptr<gloo::Context> context_;
  std::uint32_t tag_ = 1;
  int splits_ = 0;
};

}  // namespace keras::distribution
