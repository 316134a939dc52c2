// The few GPU runtime calls the engine core needs (count, memory, copies). engine/cuda/
// implements them with the CUDA runtime; a CPU-only build links engine/no_gpu/, which reports
// zero GPUs and throws NotImplementedError for the rest.
#pragma once
#include <cstddef>

namespace keras::gpu {

int device_count();
void* allocate(std::size_t bytes, int device_index);
void free(void* pointer, int device_index);
void copy_host_to_device(void* device_pointer, const void* host_pointer, std::size_t bytes,
                         int device_index);
void copy_device_to_host(void* host_pointer, const void* device_pointer, std::size_t bytes,
                         int device_index);
void copy_device_to_device(void* destination, const void* source, std::size_t bytes,
                           int device_index);

}  // namespace keras::gpu
