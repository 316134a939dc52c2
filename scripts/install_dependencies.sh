#!/usr/bin/env bash
# Installs the Debian packages keras-cpp builds, tests and runs with (as root, on Debian 12).
# The CUDA toolkit is optional: when nvcc is on PATH the GPU runtime is built too. clang-14 with
# its libFuzzer/sanitizer runtimes (libclang-rt-14-dev) and OpenMP (libomp-14-dev) builds the
# sanitize and fuzz presets (the tests under ASan and UBSan; scripts/run_fuzzers.sh). PCRE2
# matches LayoutMap keys in Python re's dialect; Gloo runs the collectives of processes started
# without mpirun. iptables (its legacy backend) sends the namespace test bed's packets to the
# delay stand-in (scripts/netns_cluster.sh).
#   --plots  also installs matplotlib (python3-matplotlib), for scripts/plot_history.py and
#            scripts/plot_all_reduce.py; neither the build nor the tests need it.
#   --slurm  also installs slurm-wlm and munge, for the test that trains under `srun -n 2` on a
#            one-node Slurm (scripts/slurm_single_node.sh); it skips without them.
set -euo pipefail
plots=0
slurm=0
for argument in "$@"; do
  case "$argument" in
    --plots) plots=1 ;;
    --slurm) slurm=1 ;;
    *) echo "install_dependencies.sh: unknown argument '$argument' (known: --plots, --slurm)" >&2; exit 2 ;;
  esac
done
packages=(cmake ninja-build g++ make pkg-config libeigen3-dev libdnnl-dev zlib1g-dev nlohmann-json3-dev libhdf5-dev libzip-dev
          libgtest-dev libbenchmark-dev dataset-fashion-mnist libopenmpi-dev openmpi-bin libpcre2-dev libgloo-dev libssl-dev fortunes iptables
          clang-14 libclang-rt-14-dev libomp-14-dev)
if [ "$plots" = 1 ]; then packages+=(python3-matplotlib); fi
if [ "$slurm" = 1 ]; then packages+=(slurm-wlm munge); fi
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
# Python's safetensors library, for the test that our weight files are readable from Python.
if command -v python3 >/dev/null 2>&1 && ! python3 -c "import safetensors, numpy" >/dev/null 2>&1; then
  python3 -m pip install -q --root-user-action=ignore safetensors numpy ||
    echo "warning: could not install safetensors/numpy; the interop test will be skipped"
fi
