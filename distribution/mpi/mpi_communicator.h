// Communicator over an MPI communicator (OpenMPI). Before each collective the ranks exchange
// its signature (operation, dtype, element count) in one tiny non-blocking all-reduce waited for
// with a deadline: a rank that never arrives gives an error naming the operation and the group
// instead of a hang, and a rank that issues a different collective is reported with the values
// on both sides (Horovod checks the same things). Once every rank has arrived the data moves
// with the blocking collective: OpenMPI's blocking MPI_Allreduce moved the 7.45 MB of MLP
// gradients in 1.2 ms here where its non-blocking MPI_Iallreduce took 2.8-3.4 ms (2 processes).
#pragma once
#include <mpi.h>

#include "distribution/communicator.h"

namespace keras::distribution {

class MpiCommunicator : public Communicator {
 public:
  // Wraps `communicator`; frees it on destruction when `owned`.
  MpiCommunicator(MPI_Comm communicator, std::string name, bool owned);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  const std::string& name() const override { return name_; }
  void all_reduce(void* data, std::int64_t count, DType dtype, ReduceOperation operation) override;
  void all_gather(const void* send, void* receive, std::int64_t count, DType dtype) override;
  void reduce_scatter(const void* send, void* receive, std::int64_t count, DType dtype,
                      ReduceOperation operation) override;
  void broadcast(void* data, std::int64_t count, DType dtype, int root) override;
  void barrier() override;
  std::shared_ptr<Communicator> split(int color, int key, const std::string& name) override;
  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::broadcast;
  using Communicator::reduce_scatter;

  // Signature checks cost one 48-byte all-reduce per collective; on by default. Without them a
  // missing rank hangs the others (there is no deadline on the blocking collective).
  void set_signature_checks(bool enabled) { signature_checks_ = enabled; }
  MPI_Comm handle() const { return communicator_; }

  // Waits for `request` with this group's deadline; `what` names it in the error.
  void wait(MPI_Request& request, const char* what);

 private:
  void check_signature(int operation_code, DType dtype, std::int64_t count, const char* what);
  void check(int status, const char* what) const;

  MPI_Comm communicator_;
  std::string name_;
  bool owned_;
  int size_ = 1;
  int rank_ = 0;
  bool signature_checks_ = true;
};

}  // namespace keras::distribution
