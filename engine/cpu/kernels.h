// The CPU backend's kernels (engine/kernel_list.h), one group per file in engine/cpu/;
// engine/cpu/cpu_backend.cpp binds them to the Backend interface.
#pragma once
#include "engine/backend.h"
#include "engine/kernel_arguments.h"

namespace keras::cpu {

#define KERAS_DECLARE_CPU_KERNEL(name, parameters, arguments) void name parameters;
KERAS_KERNELS(KERAS_DECLARE_CPU_KERNEL)
#undef KERAS_DECLARE_CPU_KERNEL

}  // namespace keras::cpu
