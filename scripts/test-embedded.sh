#!/usr/bin/env bash
# Builds the configuration most embedded users ship, the static libstreamattn.a without oneTBB
# (BUILD_SHARED_LIBS=OFF, STREAMATTN_TBB=OFF; neither CUDA nor MPI), into
# ${BUILD_DIR:-build-embedded}, and runs its test suite (the opt-in `exhaustive` label
# excepted): the API tests on the static library, the parallel-runner tests and the pthreads C
# example, the kernel tests, and the install consumers against the static archive. Shapes are
# the emulation-sized ones (STREAMATTN_TEST_SMALL): the kernels are the default build's, which
# ran them at full size; what differs here is the library's packaging and its threads.
# Prints each step's seconds. Extra arguments go to the CMake configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build-embedded}
start=$SECONDS
BUILD_DIR=$build_dir scripts/build.sh -DBUILD_SHARED_LIBS=OFF -DSTREAMATTN_TBB=OFF \
  -DSTREAMATTN_CUDA=OFF -DSTREAMATTN_MPI=OFF "$@"
echo "== embedded: build took $((SECONDS - start)) s"
if ldd "$build_dir/tests/streamattn_api_tests" | grep -E 'lib(tbb|streamattn)'; then
  echo "test-embedded.sh: the static, oneTBB-free build's tests load the libraries above" >&2
  exit 1
fi
start=$SECONDS
STREAMATTN_TEST_SMALL=1 ctest --test-dir "$build_dir" -LE exhaustive --output-on-failure \
  -j"${JOBS:-2}"
echo "== embedded: tests took $((SECONDS - start)) s"
