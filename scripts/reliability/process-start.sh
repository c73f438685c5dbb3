#!/usr/bin/env bash
# process-start.sh VGPU LIBDIR - what the start of a guest program costs: its
# first CUDA calls (vgpu bench start: dlopen, cuInit, context, first
# cuMemAlloc, each run a new process) against `vgpu serve --unix` in host
# mode, with a worker per process from a pool (the default), without a pool,
# with --isolate vm and none, and natively (DEVICE=cuda only). Results:
# $OUT/process-start.txt (one table per case) and a summary table last.
#
#   DEVICE=cuda|sim (default cuda)  N=runs per case (20)  GAP=pause between runs (500ms)
#   OUT=results folder (/tmp/vgpu-out)
#
# On the GPU machine: OUT=$OUT scripts/reliability/process-start.sh .gpu/vgpu .gpu/lib
# (about 1-2 minutes); gpu-reliability.sh runs it too.
set -uo pipefail
vgpu=$(realpath "${1:?usage: process-start.sh VGPU LIBDIR}")
lib=$(realpath "${2:?usage: process-start.sh VGPU LIBDIR}")
device=${DEVICE:-cuda}
n=${N:-20}
gap=${GAP:-500ms}
out=${OUT:-/tmp/vgpu-out}
mkdir -p "$out"
res=$out/process-start.txt
: >"$res"
sock=/tmp/vgpu-start.sock st=/tmp/vgpu-start-status.sock
summary=()

# run_case LABEL GAP SERVE-ARGS...: one backend, N processes against it.
run_case() {
	local label=$1 g=$2
	shift 2
	rm -f "$sock" "$st"
	"$vgpu" serve --device "$device" --unix "$sock" --status-socket "$st" --log-level warn "$@" >>"$out/process-start-serve.log" 2>&1 &
	local srv=$!
	for _ in $(seq 300); do [[ -S $sock && -S $st ]] && break; sleep 0.1; done
	# a pool is ready before the first program comes
	for _ in $(seq 300); do
		"$vgpu" status --status-socket "$st" --json 2>/dev/null | grep -q '"state": "starting"' || break
		sleep 0.1
	done
	echo "== $label (serve $*, gap $g)" | tee -a "$res"
	VGPU_TRANSPORT=unix:$sock LD_LIBRARY_PATH=$lib "$vgpu" bench start --n "$n" --gap "$g" --label "$label" | tee -a "$res"
	kill $srv; wait $srv 2>/dev/null
	summary+=("$(grep -E "^$label +first-call" "$res" | tail -1)")
}

if [[ $device == cuda ]]; then
	echo "== native (NVIDIA's driver, gap $gap)" | tee -a "$res"
	"$vgpu" bench start --native --n "$n" --gap "$gap" --label native | tee -a "$res"
	summary+=("$(grep -E '^native +first-call' "$res" | tail -1)")
fi
run_case pool2 "$gap" --isolate process --pool 2
run_case pool2-burst 0s --isolate process --pool 2
run_case pool0 "$gap" --isolate process --pool 0
run_case vm "$gap" --isolate vm
run_case none "$gap" --isolate none

echo
echo "first CUDA calls of a new process (dlopen to first cuMemAlloc done), $device, $n runs each:" | tee -a "$res"
printf '%-8s %-12s %10s %10s %10s %10s\n' side step median p90 min max | tee -a "$res"
printf '%s\n' "${summary[@]}" | tee -a "$res"
