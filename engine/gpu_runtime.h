// The few GPU runtime calls the engine core needs (count, memory, copies). engine/cuda/
// implements them with the CUDA runtime, every one ordered on the device's compute stream
// (copies to the host wait for it); a CPU-only build links engine/no_gpu/, which reports
// zero GPUs and throws NotImplementedError for the rest.
#pragma once
#include <cstddef>
#include <string>

namespace keras::gpu {

int device_count();
// Why there are as many GPUs as there are, for skips and errors: "built without CUDA", or the
// CUDA runtime's own words ("no CUDA-capable device is detected"), or "3 GPU(s): NVIDIA H200, …".
std::string description();
void* allocate(std::size_t bytes, int device_index);
void free(void* pointer, int device_index);
void copy_host_to_device(void* device_pointer, const void* host_pointer, std::size_t bytes,
                         int device_index);
void copy_device_to_host(void* host_pointer, const void* device_pointer, std::size_t bytes,
                         int device_index);
void copy_device_to_device(void* destination, const void* source, std::size_t bytes,
                           int device_index);
// The device's compute stream (a cudaStream_t), for libraries that order their own work
// against the engine's (NCCL).
void* compute_stream(int device_index);
// Waits until everything queued on the device's compute stream has run (benchmarks, tests).
void synchronize(int device_index);

}  // namespace keras::gpu
