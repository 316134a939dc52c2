// TrainingPosition: what a saved position must agree on with the run that resumes it, and the
// shuffling generator's state as text.
#include "training/training_position.h"

#include <cmath>
#include <sstream>

#include "engine/errors.h"

namespace keras {

std::string shuffle_state_of(const std::mt19937_64& generator) {
  std::ostringstream text;
  text << generator;
  return text.str();
}

void restore_shuffle_state(std::mt19937_64& generator, const std::string& state) {
  std::istringstream text(state);
  std::mt19937_64 restored;
  text >> restored;
  if (text.fail()) {
    throw ValueError("fit: the resumed position's shuffle_state is not a state of the shuffling "
                     "generator (std::mt19937_64)");
  }
  generator = restored;
}

void check_resumable(const TrainingPosition& saved, const TrainingPosition& run,
                     std::size_t totals_size) {
  if (saved.samples != run.samples || saved.batch_size != run.batch_size) {
    throw ValueError(str("fit: the backup was made by a fit() of ", saved.samples,
                         " samples in batches of ", saved.batch_size, "; this one has ",
                         run.samples, " samples in batches of ", run.batch_size,
                         ", so it cannot resume it"));
  }
  if (saved.epoch < 0 || saved.epoch > run.epochs) {
    throw ValueError(str("fit: cannot resume at epoch ", saved.epoch, "; this run has ",
                         run.epochs, " epochs"));
  }
  if (saved.step < 0 || saved.step > run.steps) {
    throw ValueError(str("fit: cannot resume after batch ", saved.step, " of an epoch of ",
                         run.steps, " batches"));
  }
  if (saved.step > 0 && saved.totals.size() != totals_size) {
    throw ValueError(str("fit: the resumed position holds ", saved.totals.size(),
                         " totals; this model's loss and compiled metrics need ", totals_size));
  }
  if (!std::isfinite(saved.epoch_learning_rate) || saved.epoch_learning_rate < 0) {
    throw ValueError(str("fit: the resumed position's learning rate ", saved.epoch_learning_rate,
                         " is not a finite number >= 0"));
  }
  std::mt19937_64 probe;
  restore_shuffle_state(probe, saved.shuffle_state);
}

}  // namespace keras
