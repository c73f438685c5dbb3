#!/usr/bin/env bash
# e2e-guest.sh CT DRVLIB [CT_STATIC] - runs inside the test guest (see
# e2e.sh): the CUDA test programs through /dev/vgpu on NVIDIA's runtime over
# vgpu's libcuda.so.1 (DRVLIB holds only vgpu's driver libraries): the shared
# builds of CT, both arch variants (Debian's libcudart.so.11.0 from the
# host's root), and with CT_STATIC the static builds.
set -uo pipefail
ct=$1 drv=$2 cts=${3:-}
[[ -c /dev/vgpu ]] || { echo "e2e-guest: no /dev/vgpu (vgpu.ko not loaded?)"; exit 1; }
status=0
# pageable_copies copies half the guest's RAM in the first run (TCG takes tens of
# seconds to fill and check the pages: a longer limit there); the others copy less.
limit=180
for variant in "$ct" "$ct/sm_90"; do
	echo "-- guest: NVIDIA's libcudart.so.11.0 (shared) on vgpu's libcuda.so.1: $(basename "$variant")"
	"$(dirname "$0")/cuda-tests/run.sh" "$variant" --lib "$drv" --timeout $limit | tail -6 || status=1
	export PAGEABLE_COPIES_MAX_MIB=128
	limit=60
done
# Copies stay under vgpu.ko's max_pin_mb however it is set: the library reads it
# and chunks below it (a refused chunk used to end the process's session).
pin=/sys/module/vgpu/parameters/max_pin_mb
old_pin=$(cat $pin)
echo 8 >$pin
echo "-- guest: pageable_copies with max_pin_mb=8"
PAGEABLE_COPIES_MAX_MIB=32 "$(dirname "$0")/cuda-tests/run.sh" "$ct" --lib "$drv" pageable_copies | tail -1 || status=1
echo "$old_pin" >$pin
# run_all ARGS...: run.sh's summary line, its whole table when something failed
run_all() {
	local out
	if out=$("$(dirname "$0")/cuda-tests/run.sh" "$@" 2>&1); then echo "$out" | tail -1; else echo "$out"; status=1; fi
}
if [[ -n $cts ]]; then
	echo "-- guest: NVIDIA's static runtime on vgpu's libcuda.so.1"
	run_all "$cts" --lib "$drv"
fi
exit $status
