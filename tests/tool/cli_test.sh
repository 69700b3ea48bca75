#!/usr/bin/env bash
# The streamattn tool's command line as a user meets it (ctest: tool_cli):
#   - `--help` for every subcommand prints a usage text and exits 0;
#   - a mistake prints exactly one line on stderr and exits 2;
#   - `bench sweep --quick` writes its CSV, JSON and gnuplot script, and the chart when gnuplot
#     is installed (scripts/test.sh installs it; a missing gnuplot must be said, not fatal).
# Usage: cli_test.sh STREAMATTN_BINARY WORK_DIR
set -euo pipefail
tool=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
fail() { echo "cli_test: $*" >&2; exit 1; }

for cmd in "" "info" "run" "bench" "bench sweep" "bench exp2"; do
  # shellcheck disable=SC2086  # the subcommand is two words
  out=$("$tool" $cmd --help) || fail "'streamattn $cmd --help' exited $?"
  grep -q '^usage: streamattn' <<<"$out" || fail "'streamattn $cmd --help' printed no usage"
  echo "ok: streamattn $cmd --help"
done

expect_error() {  # expected-message-regex args...
  local want=$1 status=0
  shift
  "$tool" "$@" >"$work/stdout" 2>"$work/stderr" || status=$?
  [[ $status -eq 2 ]] || fail "'streamattn $*' exited $status, not 2"
  [[ $(wc -l <"$work/stderr") -eq 1 ]] || fail "'streamattn $*' wrote $(wc -l <"$work/stderr") lines to stderr"
  grep -Eq -e "$want" "$work/stderr" || fail "'streamattn $*' said: $(cat "$work/stderr")"
  [[ ! -s $work/stdout ]] || fail "'streamattn $*' wrote to stdout"
  echo "ok: streamattn $* -> $(cat "$work/stderr")"
}
expect_error "unknown argument '--bogus'" run --bogus
expect_error "--heads-q: 'x' is not a whole number" run --heads-q x
expect_error "--heads-q 12 is not a multiple of --heads-kv 8" run --heads-q 12 --heads-kv 8
expect_error "no model 'gpt5'" run --model gpt5
expect_error "--dtype: 'f8'" run --dtype=f8
expect_error "no op 'nope'" bench nope
expect_error "needs an op" bench
expect_error "--format: 'gif'" bench sweep --format gif
expect_error "unknown argument 'frobnicate'" frobnicate

"$tool" bench sweep --quick --out "$work/sweep" >"$work/sweep.log"
cat "$work/sweep.log"
for f in sweep.csv sweep.json roofline.gp; do
  [[ -s $work/sweep/$f ]] || fail "bench sweep wrote no $f"
done
[[ $(wc -l <"$work/sweep/sweep.csv") -eq 5 ]] || fail "sweep.csv should hold a header and 4 rows"
if command -v gnuplot >/dev/null; then
  [[ -s $work/sweep/roofline.png ]] || fail "gnuplot is installed but no roofline.png was drawn"
  [[ $(head -c 4 "$work/sweep/roofline.png" | od -An -c | tr -d ' ') == '211PNG' ]] ||
    fail "roofline.png is not a PNG"
else
  grep -q "chart: not drawn: gnuplot not found" "$work/sweep.log" || fail "no word on gnuplot"
fi
echo "cli_test: all passed"
