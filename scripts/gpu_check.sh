#!/usr/bin/env bash
# The GPU check, for a machine with GPUs: a CUDA build for sm_90, the GPU half of the
# op table (its bfloat16 and float16 rows run cuBLAS' 16-bit GEMM) and the GPU tests, the GPU kernels on host memory beside them, and NCCL between the
# GPUs of the host, all into one log. Usage: bash scripts/gpu_check.sh [LOG]   (default gpu_check.log)
#
# Fashion-MNIST on one GPU runs when the dataset is at $FASHION_MNIST_DIR (default
# /usr/share/datasets/fashion-mnist). NCCL between processes (nccl_check, all_reduce_perf
# --backend nccl) needs two GPUs or more.
#
# Two ways to get the programs: with build/gpu_bundle/gpu_bundle.tar.xz present (made by
# scripts/gpu_bundle.sh on a CI machine and carried: the lent H200 machines have CUDA, CMake and
# ninja but not Eigen, oneDNN, OpenMPI, Gloo or GoogleTest, and cannot fetch them), the bundled
# programs run with the bundled libraries and the image's CUDA; otherwise the script builds
# with CUDA for sm_90, which needs scripts/install_dependencies.sh's packages.
set -uo pipefail
cd "$(dirname "$0")/.."
log=${1:-gpu_check.log}
build=build/gpu
exec > >(tee "$log") 2>&1
started=$(date +%s)
section() { echo; echo "=== $* ($(( $(date +%s) - started )) s)"; }

section "machine"
nvidia-smi -L || { echo "no nvidia-smi: no GPU here"; exit 1; }
gpus=$(nvidia-smi -L | wc -l)

bundle=build/gpu_bundle/gpu_bundle.tar.xz
if [ -f "$bundle" ]; then
  section "unpack the bundle made by scripts/gpu_bundle.sh"
  mkdir -p "$build/tests" "$build/examples/fashion_mnist" build/gpu_unpacked
  tar -xJf "$bundle" -C build/gpu_unpacked || exit 1
  cp build/gpu_unpacked/bin/keras_tests build/gpu_unpacked/bin/nccl_check "$build/tests/"
  cp build/gpu_unpacked/bin/fashion_mnist "$build/examples/fashion_mnist/"
  mkdir -p "$build/benchmarks" && cp build/gpu_unpacked/bin/training_step_benchmark \
      build/gpu_unpacked/bin/all_reduce_perf "$build/benchmarks/"
  [ -d build/gpu_unpacked/fashion-mnist ] && export FASHION_MNIST_DIR=${FASHION_MNIST_DIR:-$PWD/build/gpu_unpacked/fashion-mnist}
  # CUDA's libraries from the image: the toolkit, or the wheels of its Python.
  cuda_libraries=$(python3 - <<'PYTHON' 2>/dev/null
import importlib, os
found = []
for name in ("nvidia.cu13", "nvidia.cublas", "nvidia.nccl", "nvidia.cuda_runtime"):
    try:
        module = importlib.import_module(name)
    except ImportError:
        continue
    for root in module.__path__:
        for sub in ("lib", "lib64"):
            if os.path.isdir(os.path.join(root, sub)):
                found.append(os.path.join(root, sub))
print(":".join(found))
PYTHON
)
  export LD_LIBRARY_PATH="$PWD/build/gpu_unpacked/lib:/usr/local/cuda/lib64:${cuda_libraries}:${LD_LIBRARY_PATH:-}"
  ldd "$build/tests/keras_tests" | grep "not found" && { echo "missing libraries"; exit 1; }
else
  section "configure and build (CUDA, sm_90, warnings as errors)"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKERAS_CUDA=ON -DKERAS_WERROR=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 || exit 1
  cmake --build "$build" -j16 --target keras_tests nccl_check fashion_mnist training_step_benchmark \
      all_reduce_perf || exit 1
fi

status=0
section "op table on the GPU, and the GPU kernels on host memory"
"$build/tests/keras_tests" --gtest_brief=1 \
    --gtest_filter='AllOps/*on_gpu:AllOps/*on_gpu_kernels_on_host:Gpu.*:GpuKernelsOnHost.*' || status=1

section "engine and layer tests with a GPU present"
"$build/tests/keras_tests" --gtest_brief=1 --gtest_filter='Tensor.*:Backend.*:LayersTest.*' || status=1

section "NCCL between $gpus GPU(s)"
if [ "$gpus" -ge 2 ]; then
  mpirun --allow-run-as-root --oversubscribe -np "$gpus" "$build/tests/nccl_check" || status=1
else
  echo "one GPU: NCCL between processes needs two; nccl_check not run"
fi

section "Fashion-MNIST on one GPU (accuracy and seconds per epoch)"
data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [ -d "$data" ]; then
  "$build/examples/fashion_mnist/fashion_mnist" --device gpu --data-dir "$data" --epochs 5 \
      --min-test-accuracy 0.85 || status=1
else
  echo "no dataset at $data (set FASHION_MNIST_DIR): not run"
fi

section "the Keras guide's convnet on one GPU (Conv2D as im2col + cuBLAS, BatchNormalization)"
if [ -d "$data" ]; then
  "$build/examples/fashion_mnist/fashion_mnist" --model cnn --device gpu --data-dir "$data" --epochs 3 \
      --min-test-accuracy 0.85 || status=1
else
  echo "no dataset at $data (set FASHION_MNIST_DIR): not run"
fi

section "the convnet on one GPU under mixed_bfloat16 (cuBLAS' 16-bit GEMM for matmul and convolution)"
if [ -d "$data" ]; then
  "$build/examples/fashion_mnist/fashion_mnist" --model cnn --device gpu --data-dir "$data" --epochs 3 \
      --dtype-policy mixed_bfloat16 --min-test-accuracy 0.85 || status=1
else
  echo "no dataset at $data (set FASHION_MNIST_DIR): not run"
fi

section "training step of the 784-1024-1024-10 MLP, CPU (16 cores) beside gpu:0"
if [ -x "$build/benchmarks/training_step_benchmark" ]; then
  "$build/benchmarks/training_step_benchmark" --benchmark_min_time=1 || status=1
else
  echo "training_step_benchmark is not in this build"
fi

section "all_reduce_perf --backend nccl: ours beside raw ncclAllReduce"
if [ "$gpus" -ge 2 ]; then
  mpirun --allow-run-as-root --oversubscribe -np "$gpus" "$build/benchmarks/all_reduce_perf" \
      --backend nccl -b 8 -e 256M -f 4 -g 1 || status=1
else
  echo "one GPU: an all-reduce between processes needs two; not run"
fi
section "done: status $status"
exit $status
