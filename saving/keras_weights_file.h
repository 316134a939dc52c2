// Keras 3's weight files (.weights.h5): save_weights and load_weights in the layout Keras
// writes (saving/keras_weight_layout.h), so files move both ways between Python Keras and
// keras-cpp. Under a distribution a file holds whole tensors and never depends on the mesh:
// saving gathers one variable at a time and process 0 writes it, so a process needs, beyond
// its own blocks, room for the largest single variable; loading reads each process's block of
// each variable by hyperslab, so a process reads only what it holds. A file that fails any
// check leaves the model as it was: every block is read and checked before any variable changes.
#pragma once
#include <string>

namespace keras {
class Model;
namespace saving {

// Writes `model`'s variables and, when it is compiled, its optimizer's (iterations,
// learning_rate and per-variable state, as Keras does). Collective when a variable is sharded
// or the optimizer's state is held by blocks (DataParallel during fit): then every process
// calls it, process 0 writes, and all learn whether it succeeded.
struct WeightsWritten {
  bool here;        // this process wrote the file
  bool collective;  // every process took part (process 0 wrote)
};
WeightsWritten save_keras_weights(Model& model, const std::string& path);
// Reads a file written by save_keras_weights or by Python Keras' save_weights. The
// optimizer's part is read into a compiled model's optimizer when it has the same number of
// tensors (its state made if it had none yet), and skipped with a warning otherwise, as Keras
// does; an uncompiled model ignores it.
void load_keras_weights(Model& model, const std::string& path);

}  // namespace saving
}  // namespace keras
