#!/usr/bin/env bash
# Installs keras-cpp from a clean release build into a scratch prefix and builds
# examples/consumer/ against the installed tree only (never the build tree), twice: with
# find_package(keras) and with pkg-config. Both programs train a small model and must learn.
# CI runs this; users can too:  bash scripts/check_install.sh [prefix]
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="${1:-$(mktemp -d /tmp/keras-install.XXXXXX)}"
consumer_build="$(mktemp -d /tmp/keras-consumer.XXXXXX)"
trap 'rm -rf "$consumer_build"' EXIT

# The documented install: the release preset, its libraries, cmake --install.
cmake --preset release >/dev/null
cmake --build --preset release -j2 --target keras_engine keras_distribution keras_layers
cmake --install build/release --prefix "$prefix"

# A project of its own, with find_package(keras 0.1 REQUIRED) and keras::keras. The source
# tree is not on any include path: only the prefix is given.
cmake -S examples/consumer -B "$consumer_build/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$consumer_build/cmake"
"$consumer_build/cmake/consumer"

# The same program built with nothing but pkg-config's flags.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
echo "pkg-config keras $(pkg-config --modversion keras)"
# shellcheck disable=SC2046  # pkg-config's output is a list of flags, split on purpose
g++ -O2 examples/consumer/main.cpp -o "$consumer_build/consumer_pkg_config" $(pkg-config --cflags --libs keras)
"$consumer_build/consumer_pkg_config"
echo "install check passed: $prefix"
