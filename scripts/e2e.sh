#!/usr/bin/env bash
# e2e.sh - the whole guest path without a GPU (CI, `make test-e2e`).
#
# Builds the repository's CUDA test programs with Debian's nvcc 11.8
# (-cudart shared; default arch and sm_90), then runs them against vgpu's
# libraries and the backend's sim device twice:
#   1. host mode: `vgpu serve --device sim --unix` and VGPU_TRANSPORT=unix:...
#   2. inside the TCG test guest: vgpu.ko, /dev/vgpu, virtio-vsock,
#      vhost-user, guest-physical segments -- every byte of every copy goes
#      through guest RAM by GPA.
# The sim device does not execute kernels: the programs check everything but
# kernel arithmetic and say which checks they skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
ct=$root/build/ct-e2e
lib=$root/guest-lib/build
ko=$root/guest-driver/vgpu.ko
logs=$root/build/e2e-logs
mkdir -p "$logs"

for need in bin/vgpu "$lib/libcudart.so.11.0" "$ko"; do
	[[ -e $need ]] || { echo "e2e: $need is missing: run make first" >&2; exit 1; }
done
command -v nvcc >/dev/null || { echo "e2e: no nvcc: run scripts/setup.sh" >&2; exit 1; }

echo "== e2e: building the CUDA test programs with $(nvcc --version | tail -1)"
scripts/cuda-tests/build.sh "$ct" --arch sm_90 >"$logs/build.log" 2>&1 || { tail -40 "$logs/build.log"; exit 1; }
tail -1 "$logs/build.log"

status=0
echo "== e2e: host mode against the sim device"
sock=$root/build/e2e-sim.sock
rm -f "$sock"
bin/vgpu serve --device sim --unix "$sock" --log-level warn >"$logs/serve-hostmode.log" 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null || true' EXIT
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
# Every program, mapped_zero_copy included: host mode shares pinned memory with
# the backend as memfds, so mapped memory has a device address here too.
for variant in "$ct" "$ct/sm_90"; do
	VGPU_TRANSPORT=unix:$sock scripts/cuda-tests/run.sh "$variant" --lib "$lib" --logs "$logs/hostmode-$(basename "$variant")" | tail -4 || status=1
done
kill $srv; wait $srv 2>/dev/null || true
trap - EXIT

echo "== e2e: inside the TCG guest (vgpu.ko, virtio-vsock, vhost-user, sim device)"
VGPU_DEVICE=sim bin/vgpu vm run --module "$ko" --mem 2G --cpus 2 --timings --timeout 900s \
	-- "$root/scripts/e2e-guest.sh" "$ct" "$lib" 2>&1 | grep -v '^!!' | tee "$logs/guest.log" | tail -40
[[ ${PIPESTATUS[0]} == 0 ]] || status=1

if ((status)); then echo "e2e: FAILED (logs in $logs)"; else echo "e2e: all passed"; fi
exit $status
