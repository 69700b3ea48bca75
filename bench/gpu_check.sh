#!/usr/bin/env bash
# The CUDA backend on a GPU host, in one call of at most 8 minutes: builds for sm_90
# into build-gpu (a minute or two with 16 jobs), runs the cross-backend tests (CUDA against the CPU backend and the float64
# oracle), then prints forward TFLOP/s and decode GB/s beside PyTorch's SDPA on the same shapes.
#   bench/gpu_check.sh [build-dir]     (run from anywhere; needs nvcc, a GPU and PyTorch)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-gpu}
jobs=${JOBS:-16}
start=$SECONDS

step() { printf '\n== %s (%ds)\n' "$1" $((SECONDS - start)); }

step "configure and build (sm_90)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTREAMATTN_CUDA=ON \
  -DSTREAMATTN_CUDA_ARCHITECTURES=90-real -DSTREAMATTN_GPU_TESTS=ON >/dev/null
# Only what this check runs: the plugin, the cross-backend test, the timing program.
cmake --build "$build" -j"$jobs" --target streamattn_cuda streamattn_cuda_cross_backend_test \
  streamattn_gpu_bench streamattn_cuda_plugin_tests
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

step "the plugin on this host"
STREAMATTN_BACKEND= "$build/tests/cuda/streamattn_cuda_plugin_tests" --gtest_filter='RealPlugin.*'

step "cross-backend tests (CUDA vs CPU vs float64 oracle)"
status=0
timeout 150 "$build/tests/cuda/streamattn_cuda_cross_backend_test" || status=$?

step "timings"
csv=$(mktemp)
timeout 120 "$build/bench/streamattn_gpu_bench" | tee "$csv" || status=1
timeout 120 python3 "$root/bench/sdpa_bench.py" "$csv" || status=1
rm -f "$csv"
step "done"
exit $status
