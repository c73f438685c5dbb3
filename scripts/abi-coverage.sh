#!/bin/sh
# abi-coverage.sh - how much of what real programs import the guest library
# implements (hand-written rows of guest-lib/tables/*.tbl) versus answers
# with a NOT_SUPPORTED stub.
#
#   scripts/abi-coverage.sh [--summary] [IMPORTS...]
#
# IMPORTS default to ../shared/abi/common-programs.imports.txt (lines
# "COUNT name@lib" or "COUNT name"); *.imports.txt lists without counts work
# too (libtorch_cuda.so, libc10_cuda.so). Symbols of libraries vgpu does not
# provide (NVIDIA's libcudart, cuBLAS, cuDNN, NCCL, ...) are counted apart as
# "other library".
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TABLES=$ROOT/guest-lib/tables
SHARED=${VGPU_SHARED:-$ROOT/../shared}
summary=0
if [ "${1:-}" = "--summary" ]; then summary=1; shift; fi
[ $# -eq 0 ] && set -- "$SHARED/abi/common-programs.imports.txt"

for f in "$@"; do
	awk -v tables="$TABLES" -v summary="$summary" -v file="$(basename "$f")" '
	function kind(lib, name,   t, line, a) {
		t = tables "/" lib ".tbl"
		if (!(t in loaded)) {
			loaded[t] = 1
			while ((getline line < t) > 0) {
				if (line ~ /^#/ || line == "") continue
				split(line, a, /[ \t]+/)
				k[t, a[1]] = a[3]
			}
			close(t)
		}
		return ((t, name) in k) ? k[t, name] : "missing"
	}
	NF == 0 { next }
	{
		w = 1; sym = $1
		if (NF >= 2 && $1 ~ /^[0-9]+$/) { w = $1; sym = $2 }
		n = split(sym, p, "@"); name = p[1]; lib = (n > 1) ? p[n] : ""
		if (lib == "") lib = (name ~ /^nvml/) ? "libnvidia-ml.so.1" : (name ~ /^cu[A-Z]/) ? "libcuda.so.1" : "other"
		if (lib !~ /^(libcuda\.so\.1|libnvidia-ml\.so\.1)/) { other++; otherw += w; next }
		s = kind(lib, name)
		total++; totalw += w
		if (s == "hand") { impl++; implw += w }
		else if (!summary) printf "  %-12s %-60s %s\n", s, name, lib
	}
	END {
		printf "%s: implemented %d/%d symbols (%.0f%%), %d/%d weighted by programs using them", file, impl, total, total ? 100 * impl / total : 0, implw, totalw
		if (other) printf "; %d symbols of other libraries (NVIDIA\047s runtime, cuBLAS, cuDNN, NCCL, ...) not counted", other
		printf "\n"
	}' "$f"
done
