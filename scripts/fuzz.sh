#!/usr/bin/env bash
# fuzz.sh DURATION - run every Go fuzz target in the repository for DURATION
# each (e.g. 20s in make test, 30m for a long run). Targets are found by name:
# any `func FuzzXxx(f *testing.F)` in a _test.go file.
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-20s}
status=0
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	echo "fuzz: $pkg $name for $dur"
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$dur" -fuzzminimizetime 100x "$pkg"; then
		status=1
	fi
done < <(grep -rHoE --include='*_test.go' '^func (Fuzz[A-Za-z0-9_]+)\(' . | sed -E 's/^\.\/(.*):func (Fuzz[A-Za-z0-9_]+)\(/\1:\2/' | sort -u)
exit $status
