// Trains 2 short epochs with fit()'s default verbose="auto", for check_progress.py to look at
// what reaches the output: a bar redrawn in place on a terminal, one line per epoch elsewhere
// (training/progress_output.h). `--verbose N` passes an explicit level instead.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "keras.h"

int main(int argc, char** argv) {
  keras::distribution::initialize();
  keras::Verbose verbose = "auto";
  if (argc == 3 && std::string(argv[1]) == "--verbose") verbose = std::atoi(argv[2]);
  keras::set_random_seed(3);
  keras::Tensor x = keras::ops::random({keras::RandomDistribution::normal, 0, 1, 1}, {512, 4});
  keras::Tensor y = keras::ops::cast(
      keras::ops::random({keras::RandomDistribution::uniform, 0, 2, 2}, {512}, keras::float64),
      keras::int64);
  keras::Sequential model({keras::layers::Dense(2)});
  model.compile("sgd", keras::losses::SparseCategoricalCrossentropy(true));
  model.fit(x, y, {.batch_size = 8, .epochs = 2, .verbose = verbose});
  std::printf("resolved verbose=%d\n", verbose.resolve());
  return 0;
}
