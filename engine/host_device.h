// KERAS_HOST_DEVICE marks a function that both the CPU kernels and the CUDA kernels call, so a
// rule (a scalar op's edge cases, a random element, an index map) is written once and compiled
// by g++ for the CPU and by nvcc for the GPU. Outside nvcc it expands to nothing.
#pragma once

#if defined(__CUDACC__)
#define KERAS_HOST_DEVICE __host__ __device__
#else
#define KERAS_HOST_DEVICE
#endif
