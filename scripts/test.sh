#!/usr/bin/env bash
# Builds streamattn and runs the whole test suite (the opt-in `exhaustive` label excepted).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" -LE exhaustive --output-on-failure -j"${JOBS:-2}"
