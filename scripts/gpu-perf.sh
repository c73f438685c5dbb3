#!/usr/bin/env bash
# gpu-perf.sh [CARRY] - issue 18's per-call figures on a GPU machine, in about
# two minutes (well under 8):
#   1. the device/cuda GPU tests (the hot driver calls go through
#      purego.SyscallN) and BenchmarkPuregoCall, from CARRY's cuda-gpu.test
#   2. `vgpu bench calls` natively, then in host mode against
#      `vgpu serve --device cuda --trace` with --isolate none and --isolate vm,
#      each with the backend's per-layer breakdown; twice, natively first
#      each round, so every ratio has its baseline in the same run
#   3. host mode once more without --trace (what the stamps cost)
# Writes calls-*.txt, the serve logs and summary.txt to $OUT.
#
# CARRY is what scripts/gpu-carry.sh gathers (default .gpu): vgpu, lib/,
# cuda-gpu.test. Environment: MIN_TIME per measurement (default 1s); DEVICE
# (default cuda; sim to try the script on a machine without a GPU).
set -uo pipefail
carry=$(realpath "${1:-.gpu}")
out=${OUT:-/tmp/vgpu-out}
mkdir -p "$out"
vgpu=$carry/vgpu
mt=${MIN_TIME:-1s}

step() { echo "== $(date -u +%H:%M:%S) $*"; }
wait_socket() { for _ in $(seq 100); do [[ -S $1 ]] && return 0; sleep 0.1; done; echo "no socket $1 after 10 s"; }

step "device/cuda GPU tests and purego call cost"
if [[ -x $carry/cuda-gpu.test ]]; then
	(cd backend/device/cuda && timeout 180 "$carry/cuda-gpu.test" -test.v -test.count=1) >"$out/gotest-cuda.log" 2>&1
	echo "cuda: rc=$? $(grep -c '^--- PASS' "$out/gotest-cuda.log") passed, $(grep -c '^--- FAIL' "$out/gotest-cuda.log") failed"
	grep -E '^--- FAIL|^panic' "$out/gotest-cuda.log" | head -5
	(cd backend/device/cuda && timeout 60 "$carry/cuda-gpu.test" -test.run '^$' -test.bench PuregoCall -test.benchtime 200000x) >"$out/purego-bench.txt" 2>&1
	grep Benchmark "$out/purego-bench.txt"
else
	echo "no $carry/cuda-gpu.test (run scripts/gpu-carry.sh)"
fi

# host ISO TRACE NAME: vgpu bench calls against a host-mode backend.
host() {
	local iso=$1 trace=$2 name=$3 sock=/tmp/vgpu-perf.sock
	rm -f "$sock"
	"$vgpu" serve --device "${DEVICE:-cuda}" --sim-mem 4G --unix "$sock" --isolate "$iso" $trace --log-level warn >"$out/serve-$name.log" 2>&1 &
	local srv=$!
	wait_socket "$sock"
	LD_LIBRARY_PATH="$carry/lib" VGPU_TRANSPORT="unix:$sock" timeout 120 "$vgpu" bench calls --min-time "$mt" >"$out/calls-$name.txt" 2>&1 ||
		tail -5 "$out/calls-$name.txt"
	kill $srv
	wait $srv 2>/dev/null
}

for run in 1 2; do
	step "run $run: native"
	timeout 120 "$vgpu" bench calls --native --min-time "$mt" >"$out/calls-native-$run.txt" 2>&1 || tail -5 "$out/calls-native-$run.txt"
	for iso in none vm; do
		step "run $run: host mode --isolate $iso --trace"
		host "$iso" --trace "host-$iso-trace-$run"
	done
done
for iso in none vm; do
	step "host mode --isolate $iso, no trace"
	host "$iso" "" "host-$iso-notrace"
done

step "summary"
{
	for run in 1 2; do
		echo "### run $run"
		grep -E '^native ' "$out/calls-native-$run.txt"
		for iso in none vm; do
			echo "--isolate $iso:"
			grep -E '^vgpu ' "$out/calls-host-$iso-trace-$run.txt"
		done
		# host/native per call, same run
		for iso in none vm; do
			awk -v iso="$iso" 'FNR==NR && $1=="native" {n[$2]=$4; next}
				$1=="vgpu" && NF==5 && ($2 in n) {printf "ratio --isolate %s %-14s %6.2fx native\n", iso, $2, $4/n[$2]}' \
				"$out/calls-native-$run.txt" "$out/calls-host-$iso-trace-$run.txt"
		done
	done
	echo "### without --trace"
	for iso in none vm; do
		echo "--isolate $iso:"
		grep -E '^vgpu ' "$out/calls-host-$iso-notrace.txt"
	done
} | tee "$out/summary.txt"
