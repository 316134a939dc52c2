// Gathering, slicing and writing full tensors for the files of the trainer and its callbacks.
#include "layers/checkpoint_files.h"

#include <exception>
#include <optional>

#include "distribution/redistribute.h"
#include "distribution/runtime.h"
#include "distribution/sharded_tensor.h"
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
  if (!sharding) return full;
  auto [starts, sizes] = sharding->block(distribution::process_coordinates(*sharding->mesh()));
  return ops::slice(full, starts, sizes);
}

void write_file(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                const std::map<std::string, std::string>& metadata, bool collective,
                const char* what) {
  distribution::Communicator& world = distribution::world();
  if (!collective || world.size() == 1) {
    io::save_safetensors(path, tensors, metadata);
    return;
  }
  std::string failure;
  if (world.rank() == 0) {
    try {
      io::save_safetensors(path, tensors, metadata);
    } catch (const std::exception& error) {
      failure = error.what();
    }
  }
  std::int64_t failed = failure.empty() ? 0 : 1;
  world.all_reduce(&failed, 1, DType::int64, distribution::ReduceOperation::max);
  if (failed != 0) {
    if (world.rank() == 0) throw Error(str(what, ": ", failure));
    throw Error(str(what, ": process 0, which writes '", path, "', failed to write it"));
  }
}

}  // namespace keras::checkpoint
