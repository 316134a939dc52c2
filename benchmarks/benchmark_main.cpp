// The main() of the Google Benchmark programs: records keras::num_threads() (set by
// KERAS_NUM_THREADS) in the output's context, so every result says how many threads made it.
#include <benchmark/benchmark.h>

#include <string>

#include "engine/thread_pool.h"

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("keras_num_threads", std::to_string(keras::num_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
