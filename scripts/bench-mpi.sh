#!/usr/bin/env bash
# Builds streamattn, then runs streamattn_mpi_bench under mpirun once per rank count (RANKS,
# default "1 2 3 4") on this machine. Arguments go to the bench, e.g. `scripts/bench-mpi.sh
# --quick`. For a cluster, see the README's MPI section.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >&2
bench=${BUILD_DIR:-build}/bench/streamattn_mpi_bench
if [[ ! -x $bench ]]; then
  echo "streamattn: $bench was not built (no MPI found, or STREAMATTN_MPI=OFF)" >&2
  exit 1
fi
# Open MPI wants --oversubscribe for more ranks than cores, and both variables to run as root
# (CI does); other MPIs ignore the variables. Unbound, every rank count may use every core
# (Open MPI would otherwise pin one or two ranks to a core each).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
flags=()
mpirun --version 2>&1 | grep -q "Open MPI" && flags=(--oversubscribe --bind-to none)
for ranks in ${RANKS:-1 2 3 4}; do
  mpirun "${flags[@]}" -np "$ranks" "$bench" "$@"
done
