#!/usr/bin/env bash
# Runs every native fuzz target of the module for a short time each.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-10s}
fail=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -hoE '^func (Fuzz[A-Za-z0-9_]+)' "$dir"/*_test.go 2>/dev/null | awk '{print $2}'); do
    echo "fuzz $pkg $f for $t"
    go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg" || fail=1
  done
done
exit $fail
