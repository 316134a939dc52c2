// Where fit() is in its run (epoch, batch, the shuffling generator, the epoch's totals so far),
// for callbacks that save a run to resume it (BackupAndRestore), and the checks that a saved
// position can be resumed by the fit() call now starting.
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace keras {

struct TrainingPosition {
  int epoch = 0;          // the epoch being run, 0-based
  std::int64_t step = 0;  // its batches done; all of them when only its end is still to run
  std::string shuffle_state;  // the shuffling generator before this epoch's permutation
  // The global totals of those batches (loss sum, samples, then sum and count per compiled
  // metric), so the epoch's logs come out as an uninterrupted run's.
  std::vector<double> totals;
  // The learning rate before this epoch's on_epoch_begin callbacks ran: a resumed epoch starts
  // from it, so a schedule applied at epoch begin is not applied twice.
  double epoch_learning_rate = 0.0;
  // The fit() call it belongs to: a backup of another dataset or batch size is refused.
  std::int64_t samples = 0;
  std::int64_t batch_size = 0;
  std::int64_t steps = 0;  // batches per epoch
  int epochs = 0;
};

// Throws ValueError unless `saved` (a position saved by an earlier run) can be resumed by the
// fit() call at `run`, whose logs' totals hold `totals_size` numbers (Model::log_totals_size):
// same samples and batch size, an epoch within the run's epochs (more epochs than before is
// fine), totals for its loss and metrics, and a shuffle state that reads back.
void check_resumable(const TrainingPosition& saved, const TrainingPosition& run,
                     std::size_t totals_size);

// The shuffling generator as TrainingPosition::shuffle_state holds it, and back: restoring
// throws ValueError for text that is not a state of the generator.
std::string shuffle_state_of(const std::mt19937_64& generator);
void restore_shuffle_state(std::mt19937_64& generator, const std::string& state);

}  // namespace keras
