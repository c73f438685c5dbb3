#!/usr/bin/env bash
# gpu-fuzz.sh [CARRY] [SECONDS] - the structure-aware fuzzer against the real
# driver, on the GPU machine, in one command (about 2 x SECONDS + 1 minute).
#
# For --isolate none and --isolate vm: starts `vgpu serve --device cuda --unix`,
# runs `vgpu fuzz` against it (every field of every opcode's request at boundary
# values, alone and batched, then SECONDS of random mutations, with a good client
# checking its bytes every 50 cases), then checks that the backend (and, with
# --isolate vm, the manager) is still alive and, with --isolate none, that no
# panic was caught at a session's recover boundary. A driver segfault shows as a
# dead backend (or a worker exit in the manager's status) and "SIGSEGV" in its log.
#
# The backend runs with --call-timeout 30s, below the fuzzer's 60 s wait
# for a reply: a call that waits for the device that long is answered
# CUDA_ERROR_LAUNCH_TIMEOUT and its connection closed (the worker ended),
# which the fuzzer reports with the cases sent before it, so a failure
# says what the backend was waiting for. Each row carries the fuzzer's
# seed ("vgpu fuzz --seed N" replays the random phase).
#
# CARRY is scripts/gpu-carry.sh's folder (it holds the vgpu binary; default
# .gpu). DEVICE=sim makes a dry run without a GPU. Logs and status JSON go
# under $OUT; a table is printed last.
set -uo pipefail
carry=$(realpath "${1:-.gpu}")
secs=${2:-120}
out=${OUT:-/tmp/vgpu-fuzz-out}
mkdir -p "$out"
vgpu=$carry/vgpu
declare -a rows

for iso in none vm; do
	sock=/tmp/vgpu-fuzz-$iso.sock st=/tmp/vgpu-fuzz-$iso.status
	rm -f "$sock" "$st"
	echo "== $(date -u +%H:%M:%S) --isolate $iso: serve + fuzz ${secs}s"
	"$vgpu" serve --device "${DEVICE:-cuda}" --sim-mem 4G --isolate "$iso" --unix "$sock" --status-socket "$st" --call-timeout 30s --log-level warn 2>"$out/serve-$iso.log" &
	pid=$!
	for _ in $(seq 300); do [[ -S $st ]] && break; sleep 0.1; done
	statusflag=()
	[[ $iso == none ]] && statusflag=(--status-socket "$st")
	timeout $((secs + 420)) "$vgpu" fuzz --unix "$sock" "${statusflag[@]}" --duration "${secs}s" --timeout 60s >"$out/fuzz-$iso.log" 2>&1
	rc=$?
	alive=yes
	kill -0 "$pid" 2>/dev/null || alive=NO
	"$vgpu" status --status-socket "$st" --json >"$out/status-$iso.json" 2>&1
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	segv=$(grep -c -E 'SIGSEGV|signal arrived during cgo|fatal error' "$out/serve-$iso.log")
	panics=$(grep -c 'panic caught at the session boundary' "$out/serve-$iso.log")
	exits=$(grep -o '"status": *"[^"]*"' "$out/status-$iso.json" | grep -vc 'exit 0' || true)
	verdict=PASS
	[[ $rc == 0 && $alive == yes && $segv == 0 && $panics == 0 ]] || verdict=FAIL
	seed=$(sed -n 's/^vgpu fuzz: seed //p' "$out/fuzz-$iso.log")
	rows+=("$(printf '%-6s %-5s fuzz-rc=%-3s backend-alive=%-3s segv-lines=%-3s caught-panics=%-3s worker-exits=%-3s seed=%s %s' "$iso" "$verdict" "$rc" "$alive" "$segv" "$panics" "$exits" "$seed" "$(grep '^FUZZ cases' "$out/fuzz-$iso.log")")")
	# A failure with the cases before it (kept in $OUT/fuzz-*.log too).
	grep -E -A 30 '^FAIL' "$out/fuzz-$iso.log" | head -40
	grep -E '^FUZZ statuses' "$out/fuzz-$iso.log"
done

echo
echo "gpu-fuzz (${DEVICE:-cuda}: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | grep , | head -1)), ${secs}s of random mutations per mode:"
printf '%s\n' "${rows[@]}"
printf '%s\n' "${rows[@]}" >"$out/summary.txt"
! grep -q ' FAIL ' "$out/summary.txt"
