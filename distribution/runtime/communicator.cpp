// Tensor conveniences shared by all communicators, and the size-1 local group.
#include "distribution/runtime/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "distribution/runtime/collective_failure.h"
#include "distribution/runtime/collective_signature.h"
#include "engine/environment.h"

namespace keras::distribution {

const char* reduce_operation_name(ReduceOperation operation) {
  switch (operation) {
    case ReduceOperation::sum: return "sum";
    case ReduceOperation::mean: return "mean";
    case ReduceOperation::max: return "max";
    case ReduceOperation::min: return "min";
  }
  return "unknown";
}

std::chrono::milliseconds Communicator::default_timeout() {
  return environment::seconds("KERAS_COLLECTIVE_TIMEOUT_SECONDS", 0.001,
                              static_cast<double>(kMaximumTimeout.count()) / 1000.0)
      .value_or(std::chrono::seconds(300));
}

void Communicator::poison(const std::string& message) {
  failure_ = message;
  record_collective_failure(message);
  throw CollectiveError(message);
}

void Communicator::refuse_if_poisoned(const char* what, const std::string& consequence) const {
  if (failure_.empty()) return;
  // The communicator's own message, cut short for quoting inside another.
  std::string quoted = failure_.size() <= 400 ? failure_ : failure_.substr(0, 397) + "...";
  throw CollectiveError(str(what, " over ", name(), " refused: this communicator failed earlier and ",
                            "cannot be used again (", quoted, ")", consequence));
}

void Communicator::check_signature(std::int64_t code, DType dtype, std::int64_t count,
                                   const char* what) {
  refuse_if_poisoned(what, poisoned_consequence());
  if (size() == 1 || !signature_checks_) return;
  std::optional<std::vector<std::int64_t>> every =
      exchange_signatures({code, static_cast<std::int64_t>(dtype), count}, what);
  if (!every) return;
  const Signature mine = {code, static_cast<std::int64_t>(dtype), count};
  for (int r = 0; r < size(); ++r) {
    if (!std::equal(mine.begin(), mine.end(), every->begin() + 3 * r)) {
      poison(disagreement_message(what, *every));
    }
  }
}

void Communicator::leave() {
  if (size() == 1) return;
  std::chrono::milliseconds collective_timeout = timeout_;
  timeout_ = kMaximumTimeout;
  try {
    check_signature(collective_code(CollectiveKind::leaving), DType::int64, 0, "finalize");
  } catch (...) {
    timeout_ = collective_timeout;
    throw;
  }
  timeout_ = collective_timeout;
}

std::string Communicator::disagreement_message(const char* what,
                                               const std::vector<std::int64_t>& every) const {
  return str(what, " over ", name(), ": the ranks disagree on the collective: ",
             describe_signatures(every, size()),
             ". Every rank must issue the same collectives in the same order.");
}

std::string Communicator::deadline_message(const char* what, const std::string& why) const {
  return str(what, " over ", name(), " (", size(), " processes) did not complete within ",
             static_cast<double>(timeout_.count()) / 1000.0, " s on rank ", rank(), ": ", why,
             ". Set KERAS_COLLECTIVE_TIMEOUT_SECONDS to wait longer.");
}

void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  if (timeout < std::chrono::milliseconds(1) || timeout > kMaximumTimeout) {
    throw ValueError(str("set_timeout over ", name(), ": got ", timeout.count(), " ms; expected ",
                         "1 ms to ", kMaximumTimeout.count(), " ms"));
  }
  timeout_ = timeout;
}

Communicator& Communicator::serving(Device device, const char* what) {
  if (accepts(device)) return *this;
  std::shared_ptr<Communicator> twin = device_twin();
  if (twin && twin->accepts(device)) return *twin;
  throw ValueError(str(what, " over group '", name(), "': the tensor is on ", device.to_string(),
                       ", which this group does not serve",
                       device.is_cpu() ? " (it is NCCL's: move the tensor to its GPU)"
                       : twin          ? str(" (its GPU twin '", twin->name(),
                                             "' serves another GPU: this process's, from initialize())")
                                       : std::string(" and it has no GPU twin (NCCL needs a build with "
                                                     "NCCL, more than one process and a GPU for each)")));
}

namespace {
Communicator& serving_tensor(Communicator& group, const Tensor& tensor, const char* what) {
  if (!tensor.defined()) throw ValueError(str(what, ": the tensor is undefined"));
  return group.serving(tensor.device(), what);
}
}  // namespace

void Communicator::all_reduce(Tensor& tensor, ReduceOperation operation) {
  serving_tensor(*this, tensor, "all_reduce")
      .all_reduce(tensor.raw_data(), tensor.size(), tensor.dtype(), operation);
}

Tensor Communicator::all_gather(const Tensor& tensor) {
  Communicator& group = serving_tensor(*this, tensor, "all_gather");
  Shape shape = tensor.shape();
  shape.insert(shape.begin(), size());
  Tensor out = Tensor::empty(shape, tensor.dtype(), tensor.device());
  group.all_gather(tensor.raw_data(), out.raw_data(), tensor.size(), tensor.dtype());
  return out;
}

Tensor Communicator::reduce_scatter(const Tensor& tensor, ReduceOperation operation) {
  Communicator& group = serving_tensor(*this, tensor, "reduce_scatter");
  if (tensor.rank() == 0 || tensor.dim(0) % size() != 0) {
    throw ShapeError(str("reduce_scatter over ", name(), " (", size(),
                         " processes) needs a leading dimension divisible by ", size(),
                         ", got shape ", shape_to_string(tensor.shape())));
  }
  Shape shape = tensor.shape();
  shape[0] /= size();
  Tensor out = Tensor::empty(shape, tensor.dtype(), tensor.device());
  group.reduce_scatter(tensor.raw_data(), out.raw_data(), out.size(), tensor.dtype(), operation);
  return out;
}

void Communicator::broadcast(Tensor& tensor, int root) {
  serving_tensor(*this, tensor, "broadcast")
      .broadcast(tensor.raw_data(), tensor.size(), tensor.dtype(), root);
}

Communicator::Communicator(std::string name, int rank, int size)
    : name_(std::move(name)), rank_(rank), size_(size) {}

LocalCommunicator::LocalCommunicator(std::string name) : Communicator(std::move(name), 0, 1) {}

void LocalCommunicator::all_gather(const void* send, void* receive, std::int64_t count,
                                   DType dtype) {
  if (send != receive) std::memcpy(receive, send, static_cast<std::size_t>(count) * dtype_size(dtype));
}

void LocalCommunicator::reduce_scatter(const void* send, void* receive, std::int64_t count,
                                       DType dtype, ReduceOperation) {
  if (send != receive) std::memcpy(receive, send, static_cast<std::size_t>(count) * dtype_size(dtype));
}

void LocalCommunicator::broadcast(void*, std::int64_t, DType, int root) {
  if (root != 0) {
    throw ValueError(str("broadcast over ", name_, ": root ", root,
                         " is not a rank of this 1-process group"));
  }
}

std::shared_ptr<Communicator> LocalCommunicator::split(int, int, const std::string& name) {
  return std::make_shared<LocalCommunicator>(name);
}

}  // namespace keras::distribution
