// MPI collectives with deadlines and signature checks.
#include "distribution/mpi/mpi_communicator.h"

#include <thread>

namespace keras::distribution {
namespace {

MPI_Datatype mpi_type(DType dtype, const char* what) {
  switch (dtype) {
    case DType::float32: return MPI_FLOAT;
    case DType::float64: return MPI_DOUBLE;
    case DType::int32: return MPI_INT32_T;
    case DType::int64: return MPI_INT64_T;
    case DType::uint8: return MPI_UINT8_T;
    default: break;
  }
  throw DTypeError(str(what, ": dtype ", dtype_name(dtype), " is not supported by collectives"));
}

MPI_Op mpi_operation(ReduceOperation operation) {
  switch (operation) {
    case ReduceOperation::sum:
    case ReduceOperation::mean: return MPI_SUM;
    case ReduceOperation::max: return MPI_MAX;
    case ReduceOperation::min: return MPI_MIN;
  }
  return MPI_SUM;
}

int check_count(std::int64_t count, const char* what) {
  if (count < 0 || count > std::numeric_limits<int>::max()) {
    throw ValueError(str(what, ": element count ", count, " is outside [0, 2^31); split it"));
  }
  return static_cast<int>(count);
}

// Divides a summed buffer by the group size (mean = sum / size).
void divide(void* data, std::int64_t count, DType dtype, int size) {
  dispatch_numeric(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* values = static_cast<T*>(data);
    for (std::int64_t i = 0; i < count; ++i) values[i] = static_cast<T>(values[i] / static_cast<T>(size));
  });
}

enum OperationCode : std::int64_t {
  kAllReduce = 1, kAllGather, kReduceScatter, kBroadcast, kBarrier, kSplit
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm communicator, std::string name, bool owned)
    : communicator_(communicator), name_(std::move(name)), owned_(owned) {
  MPI_Comm_set_errhandler(communicator_, MPI_ERRORS_RETURN);
  MPI_Comm_size(communicator_, &size_);
  MPI_Comm_rank(communicator_, &rank_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized) MPI_Comm_free(&communicator_);
}

void MpiCommunicator::check(int status, const char* what) const {
  if (status == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, message, &length);
  throw CollectiveError(str(what, " over ", name_, " failed on rank ", rank_, ": ",
                            std::string(message, static_cast<std::size_t>(length))));
}

void MpiCommunicator::wait(MPI_Request& request, const char* what) {
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  int done = 0;
  // Poll without sleeping: a sleeping rank delays the others by its sleep (with 50 us sleeps the
  // signature check cost 10-20% of a 16 MiB all-reduce). After the first spins, yield between
  // polls so that oversubscribed ranks (4 processes on 2 cores in CI) still let the others run.
  for (int spins = 0; !done; ++spins) {
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) break;
    if (spins > 1000) std::this_thread::yield();
    if (std::chrono::steady_clock::now() > deadline) {
      throw CollectiveError(str(what, " over ", name_, " (", size_, " processes) did not complete ",
                                "within ", static_cast<double>(timeout_.count()) / 1000.0, " s on rank ", rank_,
                                ": another rank has not joined it (it failed, stopped, or issued ",
                                "collectives in a different order). Set ",
                                "KERAS_COLLECTIVE_TIMEOUT_SECONDS to wait longer."));
    }
  }
}

void MpiCommunicator::check_signature(int operation_code, DType dtype, std::int64_t count,
                                      const char* what) {
  if (!signature_checks_ || size_ == 1) return;
  std::int64_t signature[6] = {operation_code, static_cast<std::int64_t>(dtype), count,
                               -operation_code, -static_cast<std::int64_t>(dtype), -count};
  MPI_Request request;
  check(MPI_Iallreduce(MPI_IN_PLACE, signature, 6, MPI_INT64_T, MPI_MAX, communicator_, &request),
        what);
  wait(request, what);
  bool agree = signature[0] == -signature[3] && signature[1] == -signature[4] &&
               signature[2] == -signature[5];
  if (!agree) {
    throw CollectiveError(str(what, " over ", name_, ": the ranks disagree on the collective. Rank ",
                              rank_, " issued operation ", operation_code, " on ", count, " ",
                              dtype_name(dtype), " elements; across ranks the operation code ",
                              "ranges over [", -signature[3], ", ", signature[0],
                              "] and the element count over [", -signature[5], ", ", signature[2],
                              "]. Every rank must issue the same collectives in the same order."));
  }
}

void MpiCommunicator::all_reduce(void* data, std::int64_t count, DType dtype,
                                 ReduceOperation operation) {
  const char* what = "all_reduce";
  int n = check_count(count, what);
  check_signature(kAllReduce * 10 + static_cast<int>(operation), dtype, count, what);
  check(MPI_Allreduce(MPI_IN_PLACE, data, n, mpi_type(dtype, what), mpi_operation(operation),
                      communicator_),
        what);
  if (operation == ReduceOperation::mean) divide(data, count, dtype, size_);
}

void MpiCommunicator::all_gather(const void* send, void* receive, std::int64_t count,
                                 DType dtype) {
  const char* what = "all_gather";
  int n = check_count(count, what);
  check_signature(kAllGather * 10, dtype, count, what);
  check(MPI_Allgather(send == receive ? MPI_IN_PLACE : send, n, mpi_type(dtype, what), receive, n,
                      mpi_type(dtype, what), communicator_),
        what);
}

void MpiCommunicator::reduce_scatter(const void* send, void* receive, std::int64_t count,
                                     DType dtype, ReduceOperation operation) {
  const char* what = "reduce_scatter";
  int n = check_count(count, what);
  check_signature(kReduceScatter * 10 + static_cast<int>(operation), dtype, count, what);
  check(MPI_Reduce_scatter_block(send, receive, n, mpi_type(dtype, what), mpi_operation(operation),
                                 communicator_),
        what);
  if (operation == ReduceOperation::mean) divide(receive, count, dtype, size_);
}

void MpiCommunicator::broadcast(void* data, std::int64_t count, DType dtype, int root) {
  const char* what = "broadcast";
  if (root < 0 || root >= size_) {
    throw ValueError(str("broadcast over ", name_, ": root ", root, " is not a rank in [0, ",
                         size_, ")"));
  }
  int n = check_count(count, what);
  check_signature(kBroadcast * 10 + root, dtype, count, what);
  check(MPI_Bcast(data, n, mpi_type(dtype, what), root, communicator_), what);
}

void MpiCommunicator::barrier() {
  const char* what = "barrier";
  check_signature(kBarrier * 10, DType::int32, 0, what);
  MPI_Request request;
  check(MPI_Ibarrier(communicator_, &request), what);
  wait(request, what);
}

std::shared_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) {
  const char* what = "split";
  check_signature(kSplit * 10, DType::int32, 0, what);
  MPI_Comm child;
  // MPI_Comm_split has no non-blocking form; the signature exchange above already proved that
  // every rank reached this point, so it cannot hang on a missing rank.
  check(MPI_Comm_split(communicator_, color, key, &child), what);
  auto result = std::make_shared<MpiCommunicator>(child, name, /*owned=*/true);
  result->set_timeout(timeout_);
  result->set_signature_checks(signature_checks_);
  return result;
}

}  // namespace keras::distribution
