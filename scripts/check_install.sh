#!/usr/bin/env bash
# Installs keras-cpp from the release preset's build (or KERAS_INSTALL_PRESET's) into a scratch prefix and builds two
# projects of their own against the installed tree only (never the build tree):
# examples/consumer/ with find_package(keras) and with pkg-config (the whole library: trains a
# small model), and examples/consumer_engine/ with find_package(keras COMPONENTS engine),
# which must not need MPI. Each program must get its answer right.
# CI runs this on a clean clone; users can too:  bash scripts/check_install.sh [prefix]
set -euo pipefail
cd "$(dirname "$0")/.."
scratch="$(mktemp -d /tmp/keras-install-check.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT
prefix="${1:-$scratch/prefix}"

# The documented install: the release preset, its libraries, cmake --install.
# KERAS_INSTALL_PRESET=ci installs CI's own build instead (the release preset with -Werror,
# already built by then): one build of the CUDA kernels fewer, about 5 minutes on 2 cores.
preset="${KERAS_INSTALL_PRESET:-release}"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j2 --target keras_engine keras_distribution keras_layers
cmake --install "build/$preset" --prefix "$prefix"

# find_package(keras 0.1 REQUIRED) and keras::keras; only the prefix is given, the source tree
# is on no include path.
cmake -S examples/consumer -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$scratch/consumer"
"$scratch/consumer/consumer"

# The engine alone: COMPONENTS engine loads neither the distribution layer nor MPI.
cmake -S examples/consumer_engine -B "$scratch/consumer_engine" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$scratch/consumer_engine"
"$scratch/consumer_engine/engine_consumer"

# The whole-library program again, built with nothing but pkg-config's flags. The .pc file is
# wherever GNUInstallDirs put the libraries (lib, lib64 or lib/<multiarch>).
pc_file="$(find "$prefix" -path '*/pkgconfig/keras.pc' | head -n 1)"
[ -n "$pc_file" ] || { echo "check_install: no keras.pc under $prefix" >&2; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc_file")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
echo "pkg-config keras $(pkg-config --modversion keras)"
# shellcheck disable=SC2046  # pkg-config's output is a list of flags, split on purpose
g++ -O2 examples/consumer/main.cpp -o "$scratch/consumer_pkg_config" $(pkg-config --cflags --libs keras)
"$scratch/consumer_pkg_config"
echo "install check passed (prefix $prefix)"
