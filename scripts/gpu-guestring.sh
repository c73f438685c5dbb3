#!/usr/bin/env bash
# gpu-guestring.sh [CARRY] - issue 18.3's rings in guest RAM on a GPU machine,
# in one command (about 6 minutes):
#   1. `vgpu bench calls --native` (the baseline, first in the run)
#   2. the TCG test guest (4 CPUs) against `vgpu serve --device cuda
#      --isolate none --trace`: `vgpu bench calls` twice with the rings on
#      (the default) and twice with VGPU_RING=0 (the vsock stream), in turns,
#      and once on rings with VGPU_BATCH_SYNC=0 (a sync point sends queued
#      calls as a call first: two round trips per launch+sync; round 2's
#      rings run and this one print the library's waits, replies per call);
#      then on rings with long spins on both sides (VGPU_RING_SPIN_US=2000 in
#      the guest, --ring-spin 2ms in the backend: what the rings cost when no
#      doorbell is needed, the figure a KVM guest approaches)
#   3. the same guest against the default --isolate (a worker per VM): bench
#      calls on rings and off, and a handful of CUDA programs on rings
#      (vector_add, host_callback, two_threads, streams_overlap,
#      memcpy_to_symbol, sticky_error) and single-GPU NCCL
#   4. summary.txt: each `bench calls` table with its label, and the guest's
#      count of sessions on rings
#
# CARRY is what scripts/gpu-carry.sh gathers (default .gpu; it must be made
# from a tree with the rings: vgpu, lib/, image/ with vgpu.ko,
# qemu-bundle.tar.xz). Writes summary.txt and all.tgz (calls-*.txt, the serve
# logs, summary.txt) to $OUT. Environment: MIN_TIME per measurement (default 1s); DEVICE
# (default cuda; sim to try it without a GPU).
set -uo pipefail
carry=$(realpath "${1:-.gpu}")
final=${OUT:-/tmp/vgpu-out} # gets summary.txt and all.tgz (the device tool returns 8 files)
out=/tmp/vgpu-guestring
rm -rf "$out"
mkdir -p "$out" "$final"
vgpu=$carry/vgpu
mt=${MIN_TIME:-1s}
dev=${DEVICE:-cuda}
repo=$PWD
export PATH=/usr/local/cuda/bin:$PATH

step() { echo "== $(date -u +%H:%M:%S) $*"; }
wait_socket() { for _ in $(seq 100); do [[ -S $1 ]] && return 0; sleep 0.1; done; echo "no socket $1 after 10 s"; }

# guest SOCK LABEL -- CMD...: runs CMD in the test guest against the backend
# on SOCK, output to $out/LABEL.txt.
guest() {
	local sock=$1 label=$2
	shift 3
	"$vgpu" vm run --image "$carry/image" --bundle "$carry/qemu-bundle.tar.xz" --vgpu "$sock" \
		--mem 4G --cpus 4 --timeout 300s --env LD_LIBRARY_PATH="$carry/lib" --env MIN_TIME="$mt" -- "$@" \
		>"$out/$label.txt" 2>&1
	echo "$label: exit $?"
}

step "native"
"$vgpu" bench calls --native --min-time "$mt" >"$out/calls-native.txt" 2>&1
tail -3 "$out/calls-native.txt"

for spin in default long; do
	step "guest against --isolate none (backend spin: $spin)"
	sock=/tmp/vgpu-gr-$spin.sock
	rm -f "$sock"
	args=()
	[[ $spin == long ]] && args=(--ring-spin 2ms)
	"$vgpu" serve --device "$dev" --isolate none --trace "${args[@]}" --vhost-user-socket "$sock" \
		--log-level info >"$out/serve-none-$spin.log" 2>&1 &
	srv=$!
	wait_socket "$sock"
	if [[ $spin == default ]]; then
		guest "$sock" calls-guest-none -- "$repo/scripts/gpu-guestring-guest.sh" "$carry" calls
	else
		guest "$sock" calls-guest-none-longspin -- "$repo/scripts/gpu-guestring-guest.sh" "$carry" longspin
	fi
	kill $srv
	wait $srv 2>/dev/null
done

step "guest against the default --isolate (a worker per VM)"
sock=/tmp/vgpu-gr-vm.sock
rm -f "$sock"
"$vgpu" serve --device "$dev" --vhost-user-socket "$sock" --log-level info >"$out/serve-vm.log" 2>&1 &
srv=$!
wait_socket "$sock"
ct=$repo/build/ct
if [[ ! -x $ct/sm_90/vector_add ]]; then
	scripts/cuda-tests/build.sh "$ct" --arch sm_90 >"$out/build.log" 2>&1 || tail -20 "$out/build.log"
fi
nb=$repo/build/nccl
[[ -x $nb/nccl ]] || CUDA_LIBS_ONLY=nccl scripts/cuda-libs/build.sh "$nb" --arch sm_90 >"$out/build-nccl.log" 2>&1
guest "$sock" calls-guest-vm -- "$repo/scripts/gpu-guestring-guest.sh" "$carry" calls-once programs "$ct/sm_90" nccl "$nb/nccl"
kill $srv
wait $srv 2>/dev/null

{
	echo "# gpu-guestring.sh $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
	echo "## native"
	grep -E '^(side|native)' "$out/calls-native.txt"
	for f in calls-guest-none calls-guest-none-longspin calls-guest-vm; do
		echo "## $f"
		grep -E '^(----|side|vgpu |prog=)' "$out/$f.txt"
	done
} >"$out/summary.txt"
cp "$out/summary.txt" "$final/"
tar czf "$final/all.tgz" -C "$out" .
cat "$out/summary.txt"
