#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang-14, AddressSanitizer and
# UndefinedBehaviorSanitizer into ${FUZZ_BUILD_DIR:-build-fuzz}, then runs each for SECONDS
# (default 60) from its committed seed corpus, JOBS (default 2) at a time, printing executions
# and findings per target.
# A finding stops the script with the crashing input saved beside the build.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (targets: fuzz_attention fuzz_merge_states
#                                                 fuzz_softmax fuzz_softmax_topk
#                                                 fuzz_quantized_attention fuzz_quantize_kv)
# Reproduce a finding: build-fuzz/tests/fuzz/<target> <saved input>
#
# FUZZ_SEED (default: random) fixes libFuzzer's seed. .ci/run sets it, so a CI gate replays the
# same mutations each time instead of failing at random on a new finding; exploring is what
# the longer, unseeded runs are for.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
[[ $# -gt 0 ]] && shift
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(fuzz_attention fuzz_merge_states fuzz_softmax fuzz_softmax_topk
                                     fuzz_quantized_attention fuzz_quantize_kv)
build=${FUZZ_BUILD_DIR:-build-fuzz}

scripts/install-deps.sh clang-14 libclang-rt-14-dev
# The files that instantiate every tile kernel (STREAMATTN_TILE_KERNEL_COMPILE_OPTIONS) check
# each memory access with a call into ASan's runtime instead of inline (a call threshold of 0):
# the same checks, but inline each unrolled load of the decode steps got its own branch and
# report block, and clang-14 took 690 s of CPU for lib/cpu/decode_quantized_attention.cc
# (344 s for its AVX2 target alone; 122 s with calls, the same target).
# Every default Highway target is compiled, each input picking one the CPU runs, but AVX3 on a
# host without AVX-512, where no input could pick it (on a Zen 3 host the build took 300 s
# without it, 353-387 s with it).
targets_flag=()
if [[ $(uname -m) == x86_64 ]] && ! grep -qw avx512f /proc/cpuinfo; then
  targets_flag=(-DSTREAMATTN_HWY_DISABLED_TARGETS=256)
fi
start=$SECONDS
cmake -S . -B "$build" "${targets_flag[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-14 \
  -DCMAKE_CXX_COMPILER=clang++-14 -DSTREAMATTN_FUZZ=ON -DSTREAMATTN_CUDA=OFF -DSTREAMATTN_BUILD_TESTS=OFF \
  -DSTREAMATTN_BUILD_BENCH=OFF \
  "-DSTREAMATTN_TILE_KERNEL_COMPILE_OPTIONS=-fno-sanitize=pointer-overflow;-mllvm;-asan-instrumentation-with-call-threshold=0" \
  >/dev/null
cmake --build "$build" -j"${JOBS:-2}" --target "${targets[@]}"
echo "fuzz.sh: built in $((SECONDS - start)) s"

# One fuzzer per core at a time (JOBS, default 2): each is one process, mostly single-threaded,
# so two side by side each still get their SECONDS of a core.
fuzz_one() {  # target; its log holds libFuzzer's output
  local target=$1 work=$build/corpus/$1 seeds=tests/fuzz/corpus/$1 seed_flag=()
  # New inputs go to a working corpus in the build tree; the committed seeds stay small
  # (libFuzzer -merge=1 of a 10-minute run's corpus).
  mkdir -p "$work" "$seeds"
  [[ -n ${FUZZ_SEED:-} ]] && seed_flag=(-seed="$FUZZ_SEED")
  "$build/tests/fuzz/$target" "${seed_flag[@]}" -max_total_time="$seconds" -timeout=30 \
    -rss_limit_mb=4096 -max_len=2048 -print_final_stats=1 -artifact_prefix="$build/$target-" \
    "$work" "$seeds" >"$build/$target.log" 2>&1
}
report() {  # target exit_status
  local target=$1 log=$build/$1.log execs
  if [[ $2 -ne 0 ]]; then
    tail -n 80 "$log"
    echo "fuzz.sh: $target: FINDING (input saved as $build/$target-*)" >&2
    exit 1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  echo "fuzz.sh: $target: $execs executions in $seconds s, 0 findings," \
    "corpus $(find "$build/corpus/$target" -type f | wc -l) inputs"
}
jobs=${JOBS:-2}
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  batch=("${targets[@]:i:jobs}")
  pids=()
  for target in "${batch[@]}"; do fuzz_one "$target" & pids+=($!); done
  for j in "${!batch[@]}"; do
    status=0
    wait "${pids[j]}" || status=$?
    report "${batch[j]}" "$status"
  done
done
