#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh needs onto a lent GPU machine whose image has CUDA but none of
# the build's Debian libraries (Eigen, oneDNN, OpenMPI, Gloo, GoogleTest) and cannot fetch them:
# the CUDA build's test and example programs made here (the ci preset builds sm_80 and sm_90),
# the shared libraries they load that are not glibc's or CUDA's (the image has CUDA 13, cuBLAS
# and NCCL of its own), and the Fashion-MNIST files. About 45 MB; the device tool carries up to
# 64 MiB. Usage: bash scripts/gpu_bundle.sh [BUILD]   (default build/ci) -> build/gpu_bundle/
# Then: run(command="bash scripts/gpu_check.sh", carry=["build/gpu_bundle"])
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/ci}
bundle=build/gpu_bundle
programs=(tests/keras_tests tests/nccl_check examples/fashion_mnist/fashion_mnist
          benchmarks/training_step_benchmark benchmarks/all_reduce_perf)
rm -rf "$bundle" && mkdir -p "$bundle/bin" "$bundle/lib"
for program in "${programs[@]}"; do
  [ -x "$build/$program" ] || { echo "gpu_bundle: $build/$program is missing; build the ci preset first" >&2; exit 1; }
  cp "$build/$program" "$bundle/bin/"
  # Every library it loads, except glibc's (the image's own must be used) and CUDA's.
  ldd "$build/$program" | awk '/=> \// {print $3}' | while read -r library; do
    case "$(basename "$library")" in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libcuda.so*|libcudart*|libcublas*|libnccl*) ;;
      *) cp -L -n "$library" "$bundle/lib/" ;;
    esac
  done
done
data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [ -d "$data" ]; then cp -r "$data" "$bundle/fashion-mnist"; fi
(cd "$bundle" && tar -cJf ../gpu_bundle.tar.xz . ) && rm -rf "$bundle" && mkdir -p "$bundle" &&
  mv build/gpu_bundle.tar.xz "$bundle/"
du -sh "$bundle/gpu_bundle.tar.xz"
