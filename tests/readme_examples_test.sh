#!/usr/bin/env bash
# The README's examples are the tested files themselves: each fenced block that follows a line
# `<!-- tested: PATH -->` must be exactly the content of PATH (relative to the repository), a
# file that the suite builds and runs (tests/install/, bindings/python/examples/). So an
# example cannot drift from what is tested. Usage: readme_examples_test.sh REPO_ROOT
set -euo pipefail
root=$1
readme=$root/README.md
checked=0 failed=0 state="" path="" block=""
while IFS= read -r line || [[ -n $line ]]; do
  if [[ $line =~ ^\<\!--\ tested:\ ([^[:space:]]+)\ --\>$ ]]; then
    path=${BASH_REMATCH[1]} state=fence
  elif [[ $state == fence ]]; then
    [[ $line == '```'* ]] || { echo "README: no code block after the marker for $path" >&2; exit 1; }
    block="" state=body
  elif [[ $state == body ]]; then
    if [[ $line == '```' ]]; then
      if [[ ! -f $root/$path ]]; then
        echo "README: $path does not exist" >&2
        failed=$((failed + 1))
      elif ! diff -u --label "$path" --label "README.md block" "$root/$path" <(printf '%s' "$block"); then
        failed=$((failed + 1))
      else
        echo "ok: README block is $path"
      fi
      checked=$((checked + 1)) state=""
    else
      block+=$line$'\n'
    fi
  fi
done <"$readme"
[[ $checked -gt 0 ]] || { echo "README: no tested examples found" >&2; exit 1; }
echo "$checked README examples checked, $failed differ from their files"
[[ $failed -eq 0 ]]
