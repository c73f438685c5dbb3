#!/usr/bin/env bash
# gpu-e2e.sh CARRY - the end-to-end run on a GPU machine, in one command.
#
#   1. builds the CUDA test programs with the machine's nvcc (-cudart shared, sm_90)
#   2. runs them natively, then in host mode against `vgpu serve --device cuda`
#   3. boots the TCG test guest with the vGPU (vhost-user-vsock, vgpu.ko) and runs
#      every program in the guest, then `vgpu bench memcpy` and `vgpu bench calls`
#      there (calls on rings in guest RAM, the default, and with VGPU_RING=0);
#      the same benchmarks natively in the same run
#   4. prints a table last; logs, CSVs and the plot go under $OUT
#
# CARRY holds what a GPU machine without Go or QEMU needs (scripts/gpu-carry.sh
# makes it): vgpu, lib/ (guest libraries), image/ (test guest with vgpu.ko),
# qemu-bundle.tar.xz. Environment: BENCH_MAX (largest copy, default 1G),
# GUEST_MEM (default 8G).
set -uo pipefail
carry=$(realpath "${1:-.gpu}")
out=${OUT:-/tmp/vgpu-out}
logs=/tmp/vgpu-logs
mkdir -p "$out" "$logs"
export PATH=/usr/local/cuda/bin:$PATH
repo=$PWD
ct=$repo/build/ct
res=$repo/build/gpu-results
mkdir -p "$res"
max=${BENCH_MAX:-1G}
vgpu=$carry/vgpu

step() { echo "== $(date -u +%H:%M:%S) $*"; }
wait_socket() { for _ in $(seq 100); do [[ -S $1 ]] && return 0; sleep 0.1; done; echo "no socket $1 after 10 s"; }

step "backend GPU tests (go test -c -tags gpu binaries in CARRY)"
for t in "$carry"/*-gpu.test; do
	[[ -x $t ]] || continue
	name=$(basename "$t" -gpu.test)
	pkg=backend/$name; [[ $name == cuda ]] && pkg=backend/device/cuda
	(cd "$pkg" && timeout 300 "$t" -test.v -test.count=1) >"$logs/gotest-$name.log" 2>&1
	echo "$name: rc=$? $(grep -c '^--- PASS' "$logs/gotest-$name.log") passed, $(grep -c '^--- FAIL' "$logs/gotest-$name.log") failed, $(grep -c '^--- SKIP' "$logs/gotest-$name.log") skipped"
	grep -E '^--- FAIL|^panic' "$logs/gotest-$name.log" | head -5
done
cp bench/results/engine-*.md "$out/" 2>/dev/null

step "building the CUDA test programs"
scripts/cuda-tests/build.sh "$ct" --arch sm_90 >"$logs/build.log" 2>&1 || tail -30 "$logs/build.log"
tail -1 "$logs/build.log"

step "native"
scripts/cuda-tests/run.sh "$ct/sm_90" --out "$res/programs-native.csv" --logs "$logs/native" >"$logs/native.txt" 2>&1
tail -1 "$logs/native.txt"

step "host mode (unix socket; pinned memory shared as memfds, the rest inline)"
"$vgpu" serve --device cuda --unix /tmp/vgpu-host.sock --log-level info >"$logs/serve-host.log" 2>&1 &
hsrv=$!
wait_socket /tmp/vgpu-host.sock
# vgpu's driver libraries first, then NVIDIA's libcudart.so.13 of the toolkit
VGPU_TRANSPORT=unix:/tmp/vgpu-host.sock scripts/cuda-tests/run.sh "$ct/sm_90" --lib "$carry/lib:/usr/local/cuda/lib64" \
	--out "$res/programs-hostmode.csv" --logs "$logs/hostmode" >"$logs/hostmode.txt" 2>&1
tail -1 "$logs/hostmode.txt"
# Host-mode copies: pinned buffers are memfds shared with the backend (DMA),
# pageable ones travel inline.
LD_LIBRARY_PATH="$carry/lib" VGPU_TRANSPORT=unix:/tmp/vgpu-host.sock "$vgpu" bench memcpy --max-size 256M \
	--min-time 200ms --max-iter 200 --csv "$res/memcpy-hostmode.csv" >"$logs/bench-hostmode.txt" 2>&1 || tail -5 "$logs/bench-hostmode.txt"
kill $hsrv; wait $hsrv 2>/dev/null

step "native benchmarks"
"$vgpu" bench memcpy --native --max-size "$max" --min-time 200ms --csv "$res/memcpy-native.csv" >"$logs/bench-native.txt" 2>&1
"$vgpu" bench calls --native >"$logs/calls-native.txt" 2>&1

step "guest (TCG) with the vGPU on the GPU"
sock=/tmp/vgpu-vu.sock
"$vgpu" serve --device cuda --vhost-user-socket "$sock" --log-level info --status-socket /tmp/vgpu-status.sock >"$logs/serve-vm.log" 2>&1 &
srv=$!
wait_socket "$sock"
"$vgpu" vm run --image "$carry/image" --bundle "$carry/qemu-bundle.tar.xz" --vgpu "$sock" --share "$res" \
	--mem "${GUEST_MEM:-8G}" --cpus 4 --timings --timeout 480s \
	-- "$repo/scripts/gpu-e2e-guest.sh" "$ct" "$carry" "$res" "$max" >"$logs/guest.txt" 2>&1
echo "guest exit status: $?"
"$vgpu" status --status-socket /tmp/vgpu-status.sock >"$logs/status-after.txt" 2>&1
kill $srv; wait $srv 2>/dev/null

step "guest call latency with the backend in one process (--isolate none)"
"$vgpu" serve --device cuda --isolate none --vhost-user-socket /tmp/vgpu-vu2.sock --log-level warn >"$logs/serve-vm2.log" 2>&1 &
srv2=$!
wait_socket /tmp/vgpu-vu2.sock
"$vgpu" vm run --image "$carry/image" --bundle "$carry/qemu-bundle.tar.xz" --vgpu /tmp/vgpu-vu2.sock \
	--mem 2G --cpus 2 --timeout 120s --env LD_LIBRARY_PATH="$carry/lib" -- "$vgpu" bench calls >"$logs/calls-guest-noisolate.txt" 2>&1
kill $srv2; wait $srv2 2>/dev/null

"$vgpu" bench plot --csv "$res/memcpy-native.csv" --csv "$res/memcpy-guest.csv" --png "$res/memcpy.png" \
	--title "memcpy: guest (TCG) through vgpu vs native, $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

cp "$res"/*.csv "$res"/*.png "$out/" 2>/dev/null
tar czf "$out/logs.tgz" -C /tmp vgpu-logs

echo
echo "================ summary ================"
echo "programs native:    $(tail -1 "$logs/native.txt")"
echo "programs host mode: $(tail -1 "$logs/hostmode.txt")"
echo "programs guest:     $(grep -E 'passed, [0-9]+ failed' "$logs/guest.txt" | tail -1)"
grep -E '^\s*[a-z_0-9]+ +\| (FAIL|TIMEOUT)' "$logs/native.txt" "$logs/hostmode.txt" "$logs/guest.txt" | head -20
cat "$logs/calls-native.txt" | tail -4
echo "(guest, rings in guest RAM)"; grep -A5 -- "^---- vgpu bench calls (guest)" "$logs/guest.txt" | tail -4
echo "(guest, VGPU_RING=0)"; grep -A5 -- "^---- vgpu bench calls (guest, VGPU_RING=0" "$logs/guest.txt" | tail -4
echo "(--isolate none)"; grep -A4 "vgpu bench calls" "$logs/calls-guest-noisolate.txt" | tail -3
for f in bench-native bench-hostmode guest; do
	echo "-- $f: 256 MiB and 1 GiB copies"
	grep -hE " (268435456|1073741824) bytes" "$logs/$f.txt"
done
