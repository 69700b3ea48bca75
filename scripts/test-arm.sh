#!/usr/bin/env bash
# Cross-builds streamattn for Arm with Debian's cross compilers and multiarch packages, and runs
# the test suite (the opt-in `exhaustive` label excepted) under qemu-user, every test on every
# Highway target the builds carry (SVE_256 on request), in both configurations: the default
# (shared libstreamattn.so on oneTBB) and the one most embedded users ship (static
# libstreamattn.a without oneTBB, as scripts/test-embedded.sh builds natively):
#
#   aarch64  built in both configurations, each tested under the emulated cores it is shipped
#            for: the static, oneTBB-free build under cortex-a72 (NEON; neither BF16 nor FHM, so
#            the f32 prefill kernel), the shared oneTBB build under max with 128-bit vectors
#            (SVE2_128, as on Cortex-A510/A710 and Neoverse N2) and max (SVE2 and SVE with
#            qemu's default 512-bit vectors, the long-vector tests), both with BF16 and
#            FHM, so the Arm native prefill kernels (neon-bf16, neon-fp16); with
#            STREAMATTN_TEST_SVE_256=1 also max with 256-bit vectors (SVE_256, as on Neoverse V1)
#   armhf    32-bit ARMv7, static without oneTBB, tested under -cpu cortex-a15 (SCALAR, see the
#            toolchain file)
#
# Usage: scripts/test-arm.sh [aarch64] [armhf]      (no argument: both)
# Installs what is missing first (as root, or through sudo). Builds go to build-aarch64/ (shared,
# oneTBB), build-aarch64-embedded/ and build-armhf-embedded/ (static, no oneTBB); ccache's cache
# to build-arm-ccache/. Each static build's test binaries are checked to need neither libtbb nor
# libstreamattn.so. Each run prints the SIMD target and prefill kernels the library reports
# under that core (`streamattn info`, or the C API test where the tool is not built), the tests
# per Highway target, and the test count and wall time; a summary, naming each run's
# configuration, closes the output. A core whose library names other prefill kernels than
# expected fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=${JOBS:-2}
arches=("$@")
[[ ${#arches[@]} -gt 0 ]] || arches=(aarch64 armhf)
summary=()

# Debian's names for our architectures and their cross compilers.
debian_arch() {
  case $1 in
    aarch64) echo arm64 ;;
    armhf) echo armhf ;;
    *) echo "test-arm.sh: unknown architecture '$1' (aarch64 or armhf)" >&2; exit 2 ;;
  esac
}
cross_compiler() {
  case $1 in
    aarch64) echo g++-aarch64-linux-gnu ;;
    armhf) echo g++-arm-linux-gnueabihf ;;
  esac
}
triplet() {
  case $1 in
    aarch64) echo aarch64-linux-gnu ;;
    armhf) echo arm-linux-gnueabihf ;;
  esac
}

install_packages() {
  local packages=(cmake make ccache qemu-user) foreign=() arch d try
  for arch in "${arches[@]}"; do
    d=$(debian_arch "$arch")
    packages+=("$(cross_compiler "$arch")" "libhwy-dev:$d" "libtbb-dev:$d" "libgtest-dev:$d"
               "libgmock-dev:$d")
    dpkg --print-foreign-architectures | grep -qx "$d" || foreign+=("$d")
  done
  local sudo=""
  if [[ ${#foreign[@]} -gt 0 && $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "test-arm.sh: need root (or sudo)" >&2; exit 1; }
    sudo="sudo"
  fi
  # Another dpkg may hold its lock for a while: wait rather than fail.
  for d in "${foreign[@]}"; do
    for try in $(seq 60); do $sudo dpkg --add-architecture "$d" && break; sleep 10; done
  done
  # The same installer as the native build: it checks each name:arch, and retries apt.
  scripts/install-deps.sh "${packages[@]}"
}

# The two configurations: today's default, and the one most embedded users ship (the same as
# scripts/test-embedded.sh builds natively).
config_name() {
  case $1 in
    shared) echo "shared, oneTBB" ;;
    static) echo "static, no oneTBB" ;;
  esac
}
declare -A build_config  # build dir -> configuration name, for the runs' summary lines

build() {  # arch build_dir shared|static
  local toolchain=toolchains/$1-linux-gnu.cmake start=$SECONDS options=() stats
  [[ $1 == armhf ]] && toolchain=toolchains/arm-linux-gnueabihf.cmake
  [[ $3 == static ]] && options=(-DBUILD_SHARED_LIBS=OFF -DSTREAMATTN_TBB=OFF
                                 -DSTREAMATTN_CUDA=OFF -DSTREAMATTN_MPI=OFF)
  # SVE_256 (2^25) is compiled only for the run that tests it: no other core here picks it,
  # and it is a fifth of the kernels' compile work (lib/cpu/decode_attention.cc: 66 -> 54 s).
  [[ $1 == aarch64 && -z ${STREAMATTN_TEST_SVE_256:-} ]] &&
    options+=(-DSTREAMATTN_HWY_DISABLED_TARGETS=33554432)
  build_config[$2]=$(config_name "$3")
  echo "== $1: cross build ($(config_name "$3")) into $2"
  # ccache lets the second configuration of an architecture reuse the objects of the first: the
  # library's and the tests' objects compile from the same command lines in both (oneTBB's
  # headers are system ones; only the thread pool's source and the test helpers' oneTBB switch
  # differ). Its cache is build-arm-ccache/, empty on CI's clean checkout, so the first build of
  # each architecture compiles everything.
  CCACHE_DIR=$PWD/build-arm-ccache ccache -z >/dev/null
  cmake -S . -B "$2" -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE="$toolchain" \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache "${options[@]}" \
    >/dev/null
  CCACHE_DIR=$PWD/build-arm-ccache cmake --build "$2" -j"$jobs"
  stats=$(CCACHE_DIR=$PWD/build-arm-ccache ccache --print-stats |
    awk '/^(direct|preprocessed)_cache_hit\t/ {hit += $2} /^cache_miss\t/ {miss = $2}
         END {print hit + 0 " reused, " miss + 0 " compiled"}')
  echo "   ccache: $stats"
  if [[ $3 == static ]]; then
    # What test-embedded.sh checks with ldd, read from the ELF headers (ldd cannot run a foreign
    # binary): the tests and the C runner example need neither libtbb nor libstreamattn.so.
    local bin needed
    for bin in "$2/tests/streamattn_api_tests" "$2/tests/streamattn_c_runner_example"; do
      needed=$("$(triplet "$1")-readelf" -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
      echo "   $(basename "$bin") needs: $(echo $needed)"
      if grep -E 'lib(tbb|streamattn)' <<<"$needed"; then
        echo "test-arm.sh: $1: the static, oneTBB-free build's $bin loads the libraries above" >&2
        exit 1
      fi
    done
  fi
  summary+=("$1 build ($(config_name "$3"); ccache: $stats): $((SECONDS - start)) s")
}

run_suite() {  # label build_dir qemu cpu expected_targets(regex) expected_kernels [ctest -R/-E...]
  local label=$1 dir=$2 qemu=$3 cpu=$4 expected=$5 kernels=$6 start=$SECONDS info target log count
  local select=(-LE exhaustive "${@:7}")
  echo "== $label: test suite of $dir (${build_config[$dir]}) under $qemu -cpu $cpu"
  export STREAMATTN_QEMU_CPU=$cpu
  # `streamattn info`, or where the tool is not built (STREAMATTN_TBB=OFF) the C API test,
  # which prints the same target and kernels from the same sattn_context_get_info.
  if [[ -x $dir/bench/streamattn ]]; then
    info=$(toolchains/qemu-run.sh "$qemu" "$cpu" "$dir/bench/streamattn" info)
  else
    info=$(toolchains/qemu-run.sh "$qemu" "$cpu" "$dir/tests/streamattn_c_api_test")
  fi
  sed 's/^/   /' <<<"$info"
  target=$(sed -n -e 's/^simd target (chosen at run time): //p' \
    -e 's/^backend cpu, .* SIMD \([^ ]*\) (compiled: .*/\1/p' <<<"$info")
  if ! [[ $target =~ ^($expected)$ ]]; then
    echo "test-arm.sh: $label: streamattn info chose '$target', expected $expected" >&2
    exit 1
  fi
  # The native prefill kernels the core has must be the ones that run (and none it lacks).
  if ! grep -qx "cpu prefill tile kernel: f32 f32-fma, $kernels" <<<"$info"; then
    echo "test-arm.sh: $label: streamattn info names other prefill kernels than '$kernels'" >&2
    exit 1
  fi

  # gtest_discover_tests (PRE_TEST) caches each binary's test list and refreshes it only when
  # the binary changes, but the list depends on the emulated core (one instance per supported
  # Highway target): drop it so this run discovers its own.
  find "$dir" -name '*\[[0-9]*\]_tests.cmake' -delete
  log=$dir/Testing/$label.log
  mkdir -p "$dir/Testing"
  # Smaller shapes and sweeps under emulation; every test still runs on every target. The
  # timeout turns a hang (e.g. oneTBB under qemu -L) into a failure instead of a stuck CI.
  STREAMATTN_TEST_SMALL=1 ctest --test-dir "$dir" "${select[@]}" --output-on-failure \
    -j"$jobs" --timeout 900 >"$log" 2>&1 || { cat "$log"; exit 1; }
  count=$(sed -n 's/.*tests passed, 0 tests failed out of \([0-9]*\).*/\1/p' "$log")
  echo "   Highway targets tested (test instances per target):"
  ctest --test-dir "$dir" -N "${select[@]}" | sed -n 's|.*/\([A-Z0-9_]*\)  # GetParam.*|\1|p' |
    sort | uniq -c | sed 's/^ */     /'
  echo "   slowest tests (emulation budgets are tight: these are what to shrink):"
  sed -En 's/.*Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 s  \1/p' "$log" | sort -rn | sed -n 1,5p |
    sed 's/^/     /'
  grep 'Total Test time' "$log" | sed 's/^/   /'
  summary+=("$label, ${build_config[$dir]} (-cpu $cpu, target $target): $count tests passed in"\
" $((SECONDS - start)) s")
  unset STREAMATTN_QEMU_CPU
}

# qemu 7.2 runs SVE with 128-bit vectors about as fast as NEON, but longer vectors 10-20x
# slower per lane (exp2: 0.2 vs 2 us per float; one flash forward dtype matrix: 381 s instead of
# 23 s; one decode sweep: 400 s instead of 42 s). So the whole suite runs at 128 bits on NEON
# and SVE2_128, and the 512-bit run that -cpu max gives, there to catch code that assumes short
# vectors, runs the tests that do not depend on the target plus these tests on SVE2 and SVE: tails and lengths around tiles and lanes, head
# dims from 1 to 256, the adversarial inputs, ragged and paged caches, and the Arm native
# kernels (their NEON micro-kernels under panels of 16 to 48 rows). The whole suite on SVE2 at
# 512 bits would take about 45 minutes. SVE2 (the scalable target) no longer runs the whole
# suite at 128 bits as well: a core with 128-bit SVE2 runs SVE2_128, the same source compiled
# for that width, and that second pass took about 200 s of the CI's ARM stage.
# SVE (without SVE2) is what Highway picks on a core with SVE but not SVE2, and the ones shipped
# have 256 bits (Neoverse V1, as SVE_256) or 512 (A64FX), not 128; its code is SVE2's source
# with a few of Highway's operations written without SVE2's instructions. It runs the long-vector
# tests at 512 bits, as on an A64FX, not the whole suite again at 128 (a third of the SVE2_128
# run's 650 s on a 2-core Zen 3).
long_vector_tests=(
  'Exp2Test\.(SpecialValues|ExactPowersOfTwoAndAnyLength|NonPositiveVariant)'
  'ConvertTest\.[A-Za-z]*'
  'MergeStatesTest\.[A-Za-z]*'
  'FlashForwardTest\.(SequenceLengthsAroundTileEdges|EveryHeadDimClass)'
  'AttentionOptionsTest\.(AllOptionsCombined|RowsThatSeeNothing|NonFiniteValuesBehindMasks)'
  'AttentionOptionsTest\.ScoresThatOverflowANaiveExp'
  'DecodeTest\.(RaggedBatches|PagedCachesMatchContiguousOnes)'
  'NativeTilesTest\.[A-Za-z0-9]*'
  'CpuKernelTest\.[A-Za-z0-9]*'
)
long_vector_tests=$(IFS='|'; echo "${long_vector_tests[*]}")

install_packages
for arch in "${arches[@]}"; do
  case $arch in
    aarch64)
      # Two configurations, one emulated core each: the static, oneTBB-free one under the
      # cortex-a72 (NEON, like the Cortex-A53/A55/A72 boards embedded users ship it on), the
      # shared one with oneTBB under the SVE cores (the Neoverse servers it serves). Each
      # Highway target's kernels are the same code in both, so between them every target still
      # runs every test once (SVE the long-vector ones, see above), and each configuration's
      # own code (its threads, its packaging) runs the whole suite. Measured on the CI's 2
      # cores, shared with other builds (load 7-11): the oneTBB build 849 s (367 s unloaded),
      # then the static one 12 s, 62 of its 64 objects from ccache; the NEON run 244 tests in
      # 262 s on the static build (243 in 81 s unloaded on the oneTBB one), so the embedded
      # configuration costs the aarch64 stage about 12 s, against a second full build (~350 s
      # unloaded) or a second suite run.
      build aarch64 build-aarch64 shared
      build aarch64 build-aarch64-embedded static
      fallback="f16 f32-fma, bf16 f32-fma" native="f16 neon-fp16, bf16 neon-bf16"
      run_suite aarch64-NEON build-aarch64-embedded qemu-aarch64 cortex-a72 NEON "$fallback"
      # Instances of target-parameterised tests end in "/<target>  # GetParam() = <bits>".
      run_suite aarch64-SVE2_128 build-aarch64 qemu-aarch64 max,sve-default-vector-length=16 \
        SVE2_128 "$native" -E '/(NEON|SVE|SVE2)  # GetParam'
      run_suite aarch64-SVE2 build-aarch64 qemu-aarch64 max SVE2 "$native" \
        -R "^[^#]*\$|/($long_vector_tests)/SVE2?  # GetParam" -E '^install_consumers$'
      # SVE_256 (Neoverse V1, a server core) only on request: with its long vectors the whole
      # suite takes about as long as it would on SVE2 at 512 bits.
      if [[ -n ${STREAMATTN_TEST_SVE_256:-} ]]; then
        run_suite aarch64-SVE_256 build-aarch64 qemu-aarch64 max,sve-default-vector-length=32 \
          SVE_256 "$native" -E '/(NEON|SVE|SVE2|SVE2_128)  # GetParam'
      fi
      ;;
    armhf)
      # 32-bit boards are the embedded target par excellence: armhf builds the static,
      # oneTBB-free configuration only, in place of the shared oneTBB one: the kernels are the
      # same code, and oneTBB on Arm is tested by aarch64's SVE runs. Its whole suite on the
      # static build took as long as on the shared one (244 tests in 260 s under load 7-11;
      # 243 in 126 s unloaded before), and the build skips the tool and benchmarks (fresh,
      # 386 s under the same load; the shared build took 79 s unloaded).
      # NEON would be right on a Cortex-A15, but Debian's armhf Highway reports only SCALAR
      # (toolchains/arm-linux-gnueabihf.cmake says why); accept either so a fixed libhwy passes.
      build armhf build-armhf-embedded static
      run_suite armhf build-armhf-embedded qemu-arm cortex-a15 'NEON|SCALAR' \
        "f16 f32-fma, bf16 f32-fma"
      ;;
  esac
done
echo "== ARM summary"
printf '   %s\n' "${summary[@]}"
