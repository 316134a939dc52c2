// Gathering, slicing and writing full tensors for the files of the trainer and its callbacks.
#include "saving/checkpoint_files.h"

#include <exception>
#include <optional>

#include "distribution/sharding/redistribute.h"
#include "distribution/runtime/runtime.h"
#include "distribution/runtime/shared_outcome.h"
#include "distribution/sharding/sharded_tensor.h"
#include "engine/errors.h"
#include "engine/ops.h"
#include "io/safetensors.h"

namespace keras::checkpoint {

Tensor full_tensor(const Tensor& local, const Tensor& variable) {
  std::optional<distribution::Sharding> sharding = distribution::sharding_of(variable);
  if (!sharding) return local;
  return distribution::redistribute(
      local, *sharding,
      distribution::Sharding::replicated(sharding->mesh(), sharding->global_shape()));
}

Tensor local_block(const Tensor& full, const Tensor& variable) {
  std::optional<distribution::Sharding> sharding = distribution::sharding_of(variable);
  if (!sharding) return ops::cast(full, variable.dtype());
  auto [starts, sizes] = sharding->block(distribution::process_coordinates(*sharding->mesh()));
  return ops::cast(ops::slice(full, starts, sizes), variable.dtype());
}

void write_file(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                const std::map<std::string, std::string>& metadata, bool collective,
                const char* what) {
  distribution::Communicator& world = distribution::world();
  if (!collective || world.size() == 1) {
    io::save_safetensors(path, tensors, metadata);
    return;
  }
  std::exception_ptr failure;
  if (world.rank() == 0) {
    try {
      io::save_safetensors(path, tensors, metadata);
    } catch (const std::exception& error) {
      failure = std::make_exception_ptr(Error(str(what, ": ", error.what())));
    }
  }
  distribution::agree_on_failure(failure, str(what, ": writing '", path, "' (process 0 writes it)"));
}

}  // namespace keras::checkpoint
