#!/usr/bin/env bash
# The CMAKE_CROSSCOMPILING_EMULATOR of the toolchain files: runs one program under qemu-user.
# Usage: qemu-run.sh QEMU DEFAULT_CPU PROGRAM [ARGS...]
#
# The emulated core is read from STREAMATTN_QEMU_CPU when ctest runs, not baked in at configure
# time, so one cross build serves every core (cortex-a72: NEON, max: SVE2) without recompiling.
# qemu runs without -L: the multiarch libraries live at their native paths (/lib/ld-linux-*.so
# and /usr/lib/<triplet>), and with -L /usr/<triplet> oneTBB's worker threads hang.
set -euo pipefail
qemu=$1
cpu=${STREAMATTN_QEMU_CPU:-$2}
shift 2
exec "$qemu" -cpu "$cpu" "$@"
