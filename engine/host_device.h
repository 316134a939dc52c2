// KERAS_HOST_DEVICE marks a function that both the CPU kernels and the CUDA kernels call, so a
// rule (a scalar op's edge cases, a random element, an index map) is written once and compiled
// by g++ for the CPU and by nvcc for the GPU. Outside nvcc it expands to nothing.
#pragma once

#if defined(__CUDACC__)
#define KERAS_HOST_DEVICE __host__ __device__
#else
#define KERAS_HOST_DEVICE
#endif

// KERAS_ALWAYS_INLINE marks a rule that the CPU's element loops must inline to vectorise: GCC
// left scalar::gelu_derivative a call (its erf and exp make it large), so the loop of GELU's
// gradient ran one element at a time, 10.5% of the transformer step in `perf`.
#if defined(__CUDACC__)
#define KERAS_ALWAYS_INLINE __forceinline__
#else
#define KERAS_ALWAYS_INLINE [[gnu::always_inline]] inline
#endif
