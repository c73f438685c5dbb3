#!/usr/bin/env bash
# e2e-guest.sh CT LIB - runs inside the test guest (see e2e.sh): the CUDA
# test programs of both arch variants through /dev/vgpu.
set -uo pipefail
ct=$1 lib=$2
[[ -c /dev/vgpu ]] || { echo "e2e-guest: no /dev/vgpu (vgpu.ko not loaded?)"; exit 1; }
status=0
for variant in "$ct" "$ct/sm_90"; do
	echo "-- guest: $(basename "$variant")"
	"$(dirname "$0")/cuda-tests/run.sh" "$variant" --lib "$lib" | tail -6 || status=1
done
exit $status
