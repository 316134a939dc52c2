// Runs distribution::initialize() once, as a program must, so that CTest can check how it reads
// KERAS_DISTRIBUTION_* variables and agrees with mpirun (tests/CMakeLists.txt sets the
// environment of each case and matches the output). Prints what it found, or the error.
//   initialize_tool [--num-processes N] [--process-id N] [--job-addresses LIST]
#include <cstdio>
#include <optional>
#include <exception>
#include <string>

#include "keras.h"

int integer(const std::string& text) {
  std::size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) throw keras::ValueError("'" + text + "' is not an integer");
  return value;
}

int main(int argc, char** argv) {
  namespace kd = keras::distribution;
  try {
    std::optional<std::string> addresses;
    std::optional<int> processes, id;
    for (int i = 1; i + 1 < argc; i += 2) {
      std::string flag = argv[i];
      if (flag == "--num-processes") processes = integer(argv[i + 1]);
      else if (flag == "--process-id") id = integer(argv[i + 1]);
      else if (flag == "--job-addresses") addresses = argv[i + 1];
      else throw keras::ValueError("unknown flag " + flag);
    }
    kd::initialize(addresses, processes, id);
    // All processes must have agreed on the seed: compare it across them.
    auto seed = static_cast<std::int64_t>(keras::next_random_seed());
    std::int64_t both[2] = {seed, -seed};
    kd::world().all_reduce(both, 2, keras::int64, kd::ReduceOperation::max);
    bool agree = both[0] == -both[1];
    std::printf("initialized: processes=%d id=%d seeds %s\n", kd::num_processes(), kd::process_id(),
                agree ? "agree" : "DIFFER");
    try {
      kd::initialize();
    } catch (const keras::ValueError& error) {
      std::printf("second call: %s\n", error.what());
    }
    kd::finalize();
    return agree ? 0 : 1;
  } catch (const keras::Error& error) {
    std::printf("error: %s\n", error.what());
    return 1;
  }
}
