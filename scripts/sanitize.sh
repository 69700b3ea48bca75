#!/usr/bin/env bash
# Builds streamattn with a sanitizer preset and runs the whole test suite under it (the opt-in
# `exhaustive` label excepted):
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer, -fno-sanitize-recover=all, with
#         LeakSanitizer (on by default with ASan on Linux) checking every test process at exit
#   tsan  ThreadSanitizer
# into build-<preset>/ (CMakePresets.json). Tests run with STREAMATTN_TEST_SMALL=1 (smaller
# sweeps; every test still runs). To fit the CI budget the presets build the library and its
# tests only (no tool, no MPI component, no CUDA plugin) and fewer Highway targets:
#   asan  AVX3, AVX2 and SCALAR (STREAMATTN_HWY_DISABLED_TARGETS=6144: HWY_SSE4 | HWY_SSSE3):
#         16, 8 and 1 lanes cover the widest and narrowest tails and the scalar fallback (where
#         Max returns the number, unlike x86's, and found a bug); the 4-lane SSE4/SSSE3 paths are
#         the AVX2 ones at half width, run natively by the main suite and under ASan and UBSan
#         by the fuzzers (scripts/fuzz.sh), which pick a target per input.
#         On a host without AVX-512 the AVX3 target is left out too (6400): its tests would
#         only be skipped there (the build on a Zen 3 host: 426 s, 481 s with AVX3).
#   tsan  AVX2 and SCALAR (6400: AVX3 too); .ci/run passes -E '/SCALAR  # GetParam' so the
#         target-parameterised tests run once, on AVX2: the work split, the threads and the
#         merge order are the same code on every target, and races are what TSan looks for.
# asan compiles at -O1 -g1 (line tables, enough for ASan's and UBSan's reports): under
# ASan+UBSan GCC took 333 s and 1.4 GB for lib/cpu/attention.cc (then flash_forward.cc) alone
# at -O2 -g, 110 s at -O1 -g1; the -O2 -g build had put the CI over its 40 minutes.
# The files that instantiate every tile kernel on every target are built without ASan's
# use-after-scope check (STREAMATTN_TILE_KERNEL_COMPILE_OPTIONS in the preset): with it GCC
# took 376 s for the kernel test (then tests/flash_tile_test.cc) alone and the build 678 s,
# without it 88 s and 270 s.
# nvcc's code and the static CUDA runtime are not instrumented; the main suite tests the
# plugin's loading and faults. The MPI tests run under mpirun in the main suite.
#
# Usage: scripts/sanitize.sh asan|tsan [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:?usage: scripts/sanitize.sh asan|tsan [ctest arguments]}
shift
case $preset in asan | tsan) ;; *) echo "sanitize.sh: unknown preset '$preset'" >&2; exit 2 ;; esac

scripts/install-deps.sh
start=$SECONDS
targets=()
if [[ $preset == asan && $(uname -m) == x86_64 ]] && ! grep -qw avx512f /proc/cpuinfo; then
  targets=(-DSTREAMATTN_HWY_DISABLED_TARGETS=6400)
fi
cmake --preset "$preset" "${targets[@]}" >/dev/null
cmake --build --preset "$preset" -j"${JOBS:-2}"
built=$((SECONDS - start))

export ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# history_size=7 (the most): the suppressions match oneTBB frames of the earlier access too,
# and with the default history its stack was sometimes lost ("failed to restore the stack"),
# leaving a race inside oneTBB's task hand-over unsuppressed.
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=7:suppressions=$PWD/tests/tsan.supp"
tested=$SECONDS
STREAMATTN_TEST_SMALL=1 ctest --preset "$preset" -j"${JOBS:-2}" "$@"
echo "sanitize.sh: $preset: built in $built s, tests ran in $((SECONDS - tested)) s"
