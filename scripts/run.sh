#!/usr/bin/env bash
# The main job: builds streamattn and runs the `streamattn` tool on its default workload
# (arguments are passed to the tool, e.g. `scripts/run.sh bench exp2 --json`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >&2
exec "${BUILD_DIR:-build}/bench/streamattn" "${@:-run}"
