// Full tensors on disk whatever the distribution: what save_weights, load_weights and
// BackupAndRestore share. A sharded tensor (a variable's block under ModelParallel, or an
// optimizer slot of that variable's shape) is gathered whole before it is written and sliced
// back to this process's block when it is read, so a file never depends on the mesh it was
// written from.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace keras::checkpoint {

// The whole of `local`, a tensor laid out as `variable` is (the variable's value itself, or an
// optimizer slot of its shape): gathered from every process when `variable` is sharded (all
// must call), `local` itself otherwise.
Tensor full_tensor(const Tensor& local, const Tensor& variable);
// This process's block of `full` in `variable`'s layout (`full` when it is not sharded), in
// `variable`'s dtype.
Tensor local_block(const Tensor& full, const Tensor& variable);

// Writes a safetensors file. Alone (`collective` false): this process writes. Collective (every
// process calls): process 0 writes and every process learns whether it succeeded, so none goes
// on to read a file that is not there. `what` names the caller in errors.
void write_file(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                const std::map<std::string, std::string>& metadata, bool collective,
                const char* what);

}  // namespace keras::checkpoint
