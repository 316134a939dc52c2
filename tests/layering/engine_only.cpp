// A program that links keras::engine alone (no MPI, no collectives): that it links at all shows
// the engine needs nothing from the layers above it; check_layering.py then reads what it loads.
#include <cstdio>

#include "engine/ops.h"
#include "engine/tensor.h"
#include "engine/version.h"

int main() {
  keras::Tensor a = keras::Tensor::ones({2, 3});
  keras::Tensor b = keras::ops::matmul(a, keras::ops::transpose(a, {1, 0}));
  std::printf("keras %s engine alone: sum %.1f\n", keras::version().c_str(),
              keras::ops::sum(b).item());
  return 0;
}
