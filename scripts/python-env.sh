#!/usr/bin/env bash
# The Python environment the bindings are tested in: a virtual environment of Debian's python3
# (/usr/bin/python3, not whatever python3 comes first on PATH) at
# ${STREAMATTN_VENV:-${BUILD_DIR:-build}/venv}, holding bindings/python/requirements-test.txt
# from PyPI (made again only when that file changes), and the streamattn package installed from
# bindings/python with the library just built bundled beside it. Prints the venv's python on
# stdout; progress goes to stderr. Needs a built library (scripts/build.sh).
#
# --deps-only: make the venv and stop there (no library needed), so scripts/test.sh can fill it
# from PyPI while the library builds.
set -euo pipefail
cd "$(dirname "$0")/.."
deps_only=false
[[ ${1:-} == --deps-only ]] && deps_only=true
build_dir=${BUILD_DIR:-build}
venv=${STREAMATTN_VENV:-$build_dir/venv}
python=${STREAMATTN_PYTHON:-/usr/bin/python3}
requirements=bindings/python/requirements-test.txt
library=$build_dir/lib/libstreamattn.so.0

scripts/install-deps.sh python3-venv >&2
[[ $deps_only == true || -e $library ]] || { echo "python-env.sh: no $library: build first (scripts/build.sh)" >&2; exit 1; }

if [[ ! -x $venv/bin/python ]] || ! cmp -s "$requirements" "$venv/requirements-test.txt"; then
  echo "python-env.sh: making $venv from $requirements (PyTorch's wheels are a few GB)" >&2
  start=$SECONDS
  rm -rf "$venv"
  "$python" -m venv "$venv"
  # --no-compile: PyTorch ships thousands of modules; Python compiles the ones imported.
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-compile -r "$requirements" >&2
  cp "$requirements" "$venv/requirements-test.txt"
  echo "python-env.sh: installed in $((SECONDS - start)) s" >&2
fi
$deps_only && exit 0
# Offline by construction: the package's build backend is in the tree (pyproject.toml), so pip
# downloads nothing; the library goes into the package, where the binding looks first.
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall \
  --config-settings "library=$PWD/$library" ./bindings/python >&2
echo "$venv/bin/python"
