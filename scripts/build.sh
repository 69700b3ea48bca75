#!/usr/bin/env bash
# Configures and builds streamattn (Release) into ${BUILD_DIR:-build}, installing missing
# Debian packages first. Extra arguments go to the CMake configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build_dir" -j"${JOBS:-2}"
