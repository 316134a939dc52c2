// The step benchmarks' command lines (data_parallel_step, model_parallel_step,
// transformer_step, convnet_step), read one way: --json alone; --steps, --warmup and
// --batch-size positive integers; --dtype-policy a Keras policy name, set as the global policy
// (layers/dtype_policy.h) before the benchmark makes its model; a benchmark's own flags through `other`, which returns false
// for a flag it does not know (an error naming the flag).
#pragma once
#include <cstdlib>
#include <functional>
#include <string>

#include "keras.h"

namespace keras_benchmarks {

struct StepFlags {
  int steps = 10;
  int warmup = 3;
  std::int64_t batch_size = 128;
  bool json = false;
  std::string dtype_policy = "float32";
};

inline long positive_integer(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < 1) {
    throw keras::ValueError(keras::str(flag, " needs a positive integer, got '", text, "'"));
  }
  return value;
}

// `flags` holds the benchmark's defaults on entry.
inline void parse_step_flags(int argc, char** argv, StepFlags& flags,
                             const std::function<bool(const std::string& flag, const std::string& text)>& other = {}) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--json") {
      flags.json = true;
      continue;
    }
    if (i + 1 >= argc) throw keras::ValueError(keras::str(flag, " needs a value"));
    std::string text = argv[++i];
    if (flag == "--steps") flags.steps = static_cast<int>(positive_integer(flag, text));
    else if (flag == "--warmup") flags.warmup = static_cast<int>(positive_integer(flag, text));
    else if (flag == "--batch-size") flags.batch_size = positive_integer(flag, text);
    else if (flag == "--dtype-policy") flags.dtype_policy = keras::DTypePolicy(text).name();  // checks it
    else if (!other || !other(flag, text)) throw keras::ValueError(keras::str("unknown flag ", flag));
  }
  keras::mixed_precision::set_global_policy(flags.dtype_policy);
}

}  // namespace keras_benchmarks
