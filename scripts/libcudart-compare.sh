#!/usr/bin/env bash
# libcudart-compare.sh CT_DIR [DRV_DIR] - vgpu's own libcudart against NVIDIA's runtime on vgpu's
# libcuda.so.1 (issue 16.4): the same test programs (scripts/cuda-tests, built -cudart shared, so
# each binary loads whichever libcudart.so comes first on the library path), run once with
# VGPU_LIB (default guest-lib/build) first on LD_LIBRARY_PATH (vgpu's libcudart + libcuda) and once with only DRV_DIR
# (vgpu's libcuda.so.1 and libnvidia-ml.so.1; NVIDIA's libcudart from the system or the toolkit),
# CUDART_DIR (optional) is appended to both library paths: where NVIDIA's libcudart.so lives when
# the system's loader does not find it (on the GPU machine: /usr/local/cuda/lib64). Runs
# against the backend VGPU_TRANSPORT names (default: a `bin/vgpu serve --device sim` started here).
# Prints one markdown table: per program, the verdict and the synchronous round trips
# (VGPU_STATS=1's "total" row) under each runtime, and the totals.
set -uo pipefail
ct=$(realpath "${1:?usage: $0 CT_DIR [DRV_DIR]}")
root=$(cd "$(dirname "$0")/.." && pwd)
drv=${2:-}
ours=$(realpath "${VGPU_LIB:-$root/guest-lib/build}") # vgpu's libcudart + libcuda
if [[ -z $drv ]]; then
	drv=$(mktemp -d)
	cp -a "$ours"/libcuda.so* "$ours"/libnvidia-ml.so* "$drv/"
fi
drv=$(realpath "$drv")
if [[ -z ${VGPU_TRANSPORT:-} ]]; then
	sock=$(mktemp -u /tmp/vgpu-cmp.XXXXXX.sock)
	"$root/bin/vgpu" serve --device sim --unix "$sock" --log-level warn >/dev/null 2>&1 &
	srv=$!
	trap 'kill $srv 2>/dev/null' EXIT
	for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
	export VGPU_TRANSPORT=unix:$sock
fi
logs=$(mktemp -d)
# run LIBDIR NAME: "VERDICT ROUNDTRIPS"
run() {
	local out rc verdict trips
	out=$(LD_LIBRARY_PATH=$1${CUDART_DIR:+:$CUDART_DIR} VGPU_STATS=1 timeout 120 "$ct/$2" 2>&1)
	rc=$?
	printf "%s\nexit status %d\n" "$out" "$rc" >"$logs/$2.$3.log"
	trips=$(echo "$out" | awk '$1 == "total" && NF == 5 && $2 ~ /^[0-9]+$/ {print $2}' | tail -1)
	verdict=FAIL
	echo "$out" | grep -q "^PASS $2" && ((rc == 0)) && verdict=PASS
	echo "$out" | grep -q "^SKIP $2" && ((rc == 0)) && verdict=SKIP
	echo "$verdict ${trips:-?}"
}
echo "| program | vgpu libcudart | round trips | NVIDIA libcudart | round trips |"
echo "|---|---|---:|---|---:|"
tv=0 tn=0 pv=0 pn=0 n=0
while read -r name _; do
	[[ -z $name || $name == \#* ]] && continue
	[[ -x $ct/$name ]] || continue
	read -r vv vt < <(run "$ours" "$name" vgpu)
	read -r nv nt < <(run "$drv" "$name" nvidia)
	echo "| $name | $vv | $vt | $nv | $nt |"
	n=$((n + 1))
	[[ $vv != FAIL ]] && pv=$((pv + 1))
	[[ $nv != FAIL ]] && pn=$((pn + 1))
	[[ $vt =~ ^[0-9]+$ ]] && tv=$((tv + vt))
	[[ $nt =~ ^[0-9]+$ ]] && tn=$((tn + nt))
done <"$root/scripts/cuda-tests/programs.txt"
echo "| **total** ($n programs) | $pv pass | $tv | $pn pass | $tn |"
echo "(logs: $logs)"
