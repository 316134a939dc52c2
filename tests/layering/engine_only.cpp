// A program that links keras::engine alone (no MPI, no collectives): that it links at all shows
// the engine needs nothing from the layers above it; check_layering.py then reads what it loads,
// and this program says whether cuBLAS got mapped by CPU work alone (it must not: a CUDA build
// loads it with the first GPU, engine/cuda/cublas_library.h).
#include <cstdio>
#include <fstream>
#include <string>

#include "engine/ops.h"
#include "engine/tensor.h"
#include "engine/version.h"

int main() {
  keras::Tensor a = keras::Tensor::ones({2, 3});
  keras::Tensor b = keras::ops::matmul(a, keras::ops::transpose(a, {1, 0}));
  std::printf("keras %s engine alone: sum %.1f\n", keras::version().c_str(),
              keras::ops::sum(b).item());
  std::ifstream maps("/proc/self/maps");
  bool cublas = false;
  for (std::string line; std::getline(maps, line);) cublas = cublas || line.find("libcublas") != std::string::npos;
  std::printf("cuBLAS mapped after CPU work: %s\n", cublas ? "yes" : "no");
  return 0;
}
