#!/usr/bin/env bash
# gpu-reliability.sh CARRY [SOAK_SECONDS] - the GPU parts of the reliability
# tests (docs/RELIABILITY.md), on the GPU machine, one command, <= 9 minutes
# with the default soak (240 s; at most ~330 s fits). CARRY holds vgpu,
# lib/ (guest libraries), image/ (test guest with vgpu.ko) and
# qemu-bundle.tar.xz, as for scripts/gpu-e2e.sh (scripts/gpu-carry.sh makes it);
# nvcc (CUDA 13) is found
# in /usr/local/cuda/bin. Results go to $OUT (default /tmp/vgpu-out):
# summary.txt (one line per check, PASS/FAIL), status-*.json, logs.tgz,
# process-start.txt.
#
# One backend (`vgpu serve --device cuda`, the default --isolate process
# unless ISOLATE says otherwise, --mem-limit ${MEM_LIMIT:-4G}) serves two VMs:
#   VM B  host-mode clients (unix socket): 2 soak processes x 4 streams of
#         checksummed H2D/D2D/memset/D2H with counter kernels (checked on the
#         GPU), for SOAK_SECONDS; beside them, host-mode clients of the same
#         socket whose kernels fail an assert and store to an illegal
#         address, and one whose kernel prints (phase H);
#   VM A  the TCG test guest (vhost-user-vsock): while B soaks, phase P: two
#         soaks in A and beside them a process whose kernel fails an assert
#         (710), one with an illegal address (700) and one whose kernel
#         prints: each faulting process gets its error and stays broken, the
#         soaks finish exact, the printf lines (and the assertion) reach the
#         printing (asserting) program's own stdout (stderr) in order, and
#         nowhere else (not the backend's log); then sticky_error (700 is
#         sticky for that program), a fresh program (must work),
#         guest-faults.sh (processes SIGKILLed mid-copy and mid-launch,
#         device memory back to baseline, crafted frames, its own soak), and
#         the cap: an allocation above MEM_LIMIT gets
#         CUDA_ERROR_OUT_OF_MEMORY (2), one below works.
# Then: B finished with 0 corrupt bytes; the backend has no sessions and no
# device memory allocated; its fd count is back to what it was. Last, the
# start of a guest program (first CUDA calls) natively, with the worker
# pool, without it, with --isolate vm and none (process-start.sh, N=10).
#
# Meanwhile (RESTART=0 skips it), a backend restart under a running VM: a
# second backend (`vgpu serve --front-socket`, same device and options) and
# VM C, a TCG guest whose vGPU device is served by a front (`vgpu vm run
# --front`: the launcher is the front). While a soak runs in C the backend
# is SIGKILLed: the running program must fail with an error (no hang), its
# GPU memory must be released (the killed processes leave nvidia-smi), a
# program started while no backend is up must fail at once; a new backend on
# the same front socket must then serve a new program in the same VM.
set -uo pipefail
carry=$(realpath "${1:-.gpu}")
soak=${2:-240}
isolate=${ISOLATE:-process}
device=${DEVICE:-cuda} # DEVICE=sim: a dry run on a machine without a GPU
limit=${MEM_LIMIT:-4G}
out=${OUT:-/tmp/vgpu-out}
logs=/tmp/vgpu-rel-logs
rm -rf "$logs"; mkdir -p "$out" "$logs"
export PATH=/usr/local/cuda/bin:$PATH
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=$repo/build/reliability/gpu-bin
summary=$out/summary.txt
: >"$summary"
result() { echo "$1 $2${3:+: $3}" | tee -a "$summary"; }
start=$(date +%s)

"$repo/scripts/reliability/build.sh" "$bin" >"$logs/build.log" 2>&1 || { result FAIL build "$(tail -5 "$logs/build.log")"; exit 1; }
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >"$out/nvidia-smi-before.csv" 2>&1

vs=/tmp/vgpu-rel-vu.sock hs=/tmp/vgpu-rel-host.sock ss=/tmp/vgpu-rel-status.sock
rm -f "$vs" "$hs" "$ss"
"$carry/vgpu" serve --device "$device" --isolate "$isolate" --mem-limit "$limit" --vhost-user-socket "$vs" --unix "$hs" \
	--status-socket "$ss" --log-level info >"$logs/serve.log" 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null' EXIT
for _ in $(seq 100); do [[ -S $vs && -S $hs && -S $ss ]] && break; sleep 0.1; done
fds() { ls /proc/$srv/fd 2>/dev/null | wc -l; }
fd0=$(fds)
"$carry/vgpu" status --status-socket "$ss" --json >"$out/status-before.json"

echo "== VM B: host-mode soak, 2 processes x 4 streams, ${soak}s"
for i in 1 2; do
	VGPU_TRANSPORT=unix:$hs LD_LIBRARY_PATH=$carry/lib "$bin/soak" --seconds "$soak" --streams 4 --bytes $((8 << 20)) --launch --seed $i \
		>"$logs/soak-b$i.log" 2>&1 &
	eval "b$i=$!"
done

# Phase H: host-mode clients of B's socket that fault and print, beside B's
# soaks (after they got going).
host_faults() {
	sleep 20
	local m
	for m in assert illegal; do
		VGPU_TRANSPORT=unix:$hs LD_LIBRARY_PATH=$carry/lib "$bin/isolation" $m >"$logs/host-$m.out" 2>"$logs/host-$m.err"
		echo "H $m exit $?" >>"$logs/host-faults.log"
	done
	VGPU_TRANSPORT=unix:$hs LD_LIBRARY_PATH=$carry/lib "$bin/isolation" printf 5 >"$logs/host-printf.out" 2>"$logs/host-printf.err"
	echo "H printf exit $?" >>"$logs/host-faults.log"
}
: >"$logs/host-faults.log"
host_faults &
hf=$!

# Phase C: backend restart under a running VM (in the background, while A
# runs); its lines go to $out/restart.txt and then to the summary.
restart_phase() {
	local fsock=/tmp/vgpu-rel-front.sock ss2=/tmp/vgpu-rel-status2.sock r=$out/restart.txt log=$logs/vm-c.log srv2 vmc rcC
	: >"$r"
	res() { echo "$1 $2${3:+: $3}" >>"$r"; }
	status2() { "$carry/vgpu" status --status-socket "$ss2" --json 2>/dev/null; }
	start_serve() {
		rm -f "$ss2"
		"$carry/vgpu" serve --device "$device" --isolate "$isolate" --mem-limit "$limit" --front-socket "$fsock" \
			--status-socket "$ss2" --log-level info >>"$logs/serve-restart.log" 2>&1 &
		srv2=$!
		for _ in $(seq 200); do status2 >/dev/null && return 0; sleep 0.1; done
		res FAIL "C: backend did not start" "$(tail -3 "$logs/serve-restart.log")"
		return 1
	}
	wait_line() { # wait_line PATTERN SECONDS: until the guest prints it (or vm run ends)
		for _ in $(seq $(($2 * 10))); do
			grep -q "$1" "$log" && return 0
			kill -0 $vmc 2>/dev/null || return 1
			sleep 0.1
		done
		return 1
	}
	trap 'kill $srv2 $vmc 2>/dev/null' EXIT
	rm -f "$fsock"
	start_serve || return
	cat >"$bin/vm-c.sh" <<EOS
#!/bin/sh
export LD_LIBRARY_PATH=$carry/lib
$bin/soak --seconds 3 --streams 2 --launch | tail -1
$bin/soak --seconds 0 --ready-file /tmp/ready --bytes $((8 << 20)) --streams 2 --launch >/tmp/k.log 2>&1 & pid=\$!
n=0; while [ ! -e /tmp/ready ] && [ \$n -lt 1200 ]; do sleep 0.1; n=\$((n+1)); done
echo KILL-BACKEND-NOW
n=0; while kill -0 \$pid 2>/dev/null && [ \$n -lt 1200 ]; do sleep 0.1; n=\$((n+1)); done
if kill -0 \$pid 2>/dev/null; then echo SOAK-HUNG; kill -9 \$pid; exit 1; fi
wait \$pid; echo "soak when the backend was killed: exit \$? (\$(grep -E '^(PASS|FAIL) soak' /tmp/k.log | tail -1))"
timeout 60 $bin/soak --seconds 1 --streams 1 >/tmp/p.log 2>&1; echo "soak with no backend: exit \$? (\$(grep -E '^(PASS|FAIL) soak' /tmp/p.log | tail -1))"
echo START-BACKEND-NOW
i=0
while [ \$i -lt 60 ]; do
	if timeout 120 $bin/soak --seconds 10 --streams 2 --launch >/tmp/s.log 2>&1; then tail -2 /tmp/s.log; echo "RESTART-PASS after \$i retries"; exit 0; fi
	i=\$((i+1)); sleep 0.5
done
tail -2 /tmp/s.log; echo RESTART-FAIL; exit 1
EOS
	chmod +x "$bin/vm-c.sh"
	timeout 400 "$carry/vgpu" vm run --image "$carry/image" "${bundle[@]}" --front "$fsock" --mem 4G --cpus 4 --timeout 380s \
		-- "$bin/vm-c.sh" >"$log" 2>&1 &
	vmc=$!
	if ! wait_line KILL-BACKEND-NOW 300; then
		res FAIL "C: the soak in VM C never got going" "$(tail -3 "$log")"
		kill $vmc $srv2 2>/dev/null; wait $vmc $srv2 2>/dev/null; return
	fi
	status2 >"$out/status-restart-before-kill.json"
	local pids="$srv2 $(python3 -c 'import json,sys; w=(json.load(open(sys.argv[1])).get("workers") or {}).get("workers") or []; print(" ".join(str(x["pid"]) for x in w))' "$out/status-restart-before-kill.json" 2>/dev/null)"
	nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader >"$out/nvidia-smi-restart-before-kill.csv" 2>&1
	kill -9 $srv2; wait $srv2 2>/dev/null
	local alive=""
	for _ in $(seq 100); do
		alive=""
		for p in $pids; do kill -0 $p 2>/dev/null && alive="$alive $p"; done
		nvidia-smi --query-compute-apps=pid --format=csv,noheader >"$out/nvidia-smi-restart-after-kill.csv" 2>/dev/null
		for p in $pids; do grep -qx " *$p *" "$out/nvidia-smi-restart-after-kill.csv" && alive="$alive gpu:$p"; done
		[[ -z $alive ]] && break
		sleep 0.1
	done
	[[ -z $alive ]] && res PASS "C: backend SIGKILLed mid-soak; its processes ($pids) and their GPU memory are gone" \
		|| res FAIL "C: after kill -9 of the backend, still alive or holding GPU memory:$alive"
	if ! wait_line START-BACKEND-NOW 180; then
		res FAIL "C: the program running in VM C did not end after the backend was killed" "$(tail -3 "$log")"
		kill $vmc 2>/dev/null; wait $vmc 2>/dev/null; return
	fi
	grep -q 'backend was killed: exit 1 (FAIL soak' "$log" && res PASS "C: the running program got an error, no hang ($(grep -o 'cudaError[A-Za-z]* ([0-9]*)' "$log" | head -1))" \
		|| res FAIL "C: the running program" "$(grep 'backend was killed' "$log")"
	grep -q 'soak with no backend: exit 1 (FAIL soak' "$log" && res PASS "C: a program started with no backend fails at once" \
		|| res FAIL "C: program with no backend" "$(grep 'soak with no backend' "$log")"
	start_serve || { kill $vmc 2>/dev/null; wait $vmc 2>/dev/null; return; }
	wait $vmc; rcC=$?
	grep -E '^(SOAK|PASS|FAIL|RESTART|soak |KILL|START)' "$log" >"$out/vm-c.txt"
	grep -q 'RESTART-PASS' "$log" && res PASS "C: new backend on the same front socket; a new program in the same VM works ($(grep -o 'RESTART-PASS.*' "$log"))" \
		|| res FAIL "C: new program after the restart" "$(tail -3 "$log")"
	[[ $rcC == 0 ]] || res FAIL "C: vm run exit $rcC"
	sleep 2
	status2 >"$out/status-restart-after.json"
	python3 - "$out/status-restart-after.json" >>"$r" <<'EOP'
import json, sys
s = json.load(open(sys.argv[1]))
used = sum(d.get("mem_used_by_vgpu", 0) for d in s.get("devices") or [])
vms = [v for v in s.get("vms") or [] if v.get("mem_used")]
print(("PASS" if not s.get("sessions") and not used and not vms else "FAIL"),
      "C: new backend after VM C: %d sessions, %d bytes of device memory, VMs holding memory: %s" % (len(s.get("sessions") or []), used, vms))
EOP
	kill $srv2; wait $srv2 2>/dev/null
}
bundle=()
[[ -e $carry/qemu-bundle.tar.xz ]] && bundle=(--bundle "$carry/qemu-bundle.tar.xz")
pc=
if [[ ${RESTART:-1} != 0 ]]; then
	echo "== VM C: backend restart under a running VM (in the background)"
	restart_phase &
	pc=$!
fi

echo "== VM A: TCG guest: sticky error, guest faults, cap"
cat >"$bin/vm-a.sh" <<EOS
#!/bin/sh
export LD_LIBRARY_PATH=$carry/lib
echo "== P: faulting and printing processes beside two soaks of the same VM"
for i in 1 2; do $bin/soak --seconds 60 --streams 2 --launch --seed 1\$i > /tmp/psoak.\$i.log 2>&1 & done
sleep 10
$bin/isolation assert > /tmp/pa.out 2> /tmp/pa.err; echo "P assert exit \$?"; sed 's/^/P-OUT /' /tmp/pa.out; sed 's/^/P-ERR /' /tmp/pa.err
$bin/isolation illegal > /tmp/pi.out 2>&1; echo "P illegal exit \$?"; sed 's/^/P-OUT /' /tmp/pi.out
$bin/isolation printf 7 > /tmp/pp.out 2> /tmp/pp.err; echo "P printf exit \$?"; sed 's/^/P-PRINTF /' /tmp/pp.out; sed 's/^/P-PRINTF-ERR /' /tmp/pp.err
wait
for i in 1 2; do grep -E '^(SOAK|PASS|FAIL)' /tmp/psoak.\$i.log | sed 's/^/P-SOAK /'; done
echo "== sticky_error"; $bin/sticky_error 2>&1 | tail -4
echo "== after the sticky error, a new program"; $bin/soak --seconds 5 --streams 2 --launch | tail -2
echo "== guest-faults"; $bin/guest-faults.sh $bin $carry/lib 20 2 2
echo "== cap"; $bin/soak --alloc \$(( $(numfmt --from=iec "$limit") + (1 << 30) )); $bin/soak --alloc \$(( $(numfmt --from=iec "$limit") / 2 ))
echo "== start of a guest program (its worker from the pool; first copy: the worker registers guest RAM)"; $carry/vgpu bench start --n 5 --gap 1s | sed 's/^/GSTART /'
EOS
chmod +x "$bin/vm-a.sh"
timeout 420 "$carry/vgpu" vm run --image "$carry/image" "${bundle[@]}" --vgpu "$vs" --mem 4G --cpus 4 --timeout 400s \
	-- "$bin/vm-a.sh" >"$logs/vm-a.log" 2>&1
rcA=$?
grep -v '^!!' "$logs/vm-a.log" | grep -E '^(==|PASS|FAIL|SKIP|PHASE|SOAK|ALLOC|killed|ATTACK.*UNEXP|guest-attack|GUEST|P )|^P-' | tee "$out/vm-a.txt"
# printf_ok FILE TAG [PREFIX]: HOST before TAG, the 4 device lines in any order, HOST after TAG, PASS
printf_ok() {
	python3 - "$@" <<'EOP'
import sys
path, tag = sys.argv[1], int(sys.argv[2])
prefix = sys.argv[3] if len(sys.argv) > 3 else ""
lines = [l.rstrip("\r\n")[len(prefix):] for l in open(path, errors="replace") if l.startswith(prefix)]
lines = [l for l in lines if l]
probe = {"vgpu printf probe: tag %d block %d thread %d" % (tag, b, t) for b in range(2) for t in range(2)}
ok = len(lines) == 7 and lines[0] == "HOST before %d" % tag and set(lines[1:5]) == probe and lines[5] == "HOST after %d" % tag
print("ok" if ok else "bad: %r" % lines)
sys.exit(0 if ok else 1)
EOP
}
grep -q 'P assert exit 0' "$logs/vm-a.log" && grep -q 'P-OUT PASS isolation assert' "$logs/vm-a.log" \
	&& result PASS "P: a guest process's device assert: 710, and its context stays broken" || result FAIL "P: assert" "$(grep -E '^P(-OUT)? .*assert' "$logs/vm-a.log" | head -3)"
grep -q 'P-ERR .*Assertion' "$logs/vm-a.log" && result PASS "P: the assertion message reached that program's own stderr" || result FAIL "P: assertion message not in the asserting program's stderr"
grep -q 'P illegal exit 0' "$logs/vm-a.log" && grep -q 'P-OUT PASS isolation illegal' "$logs/vm-a.log" \
	&& result PASS "P: a guest process's illegal address: 700, sticky for it" || result FAIL "P: illegal" "$(grep -E '^P(-OUT)? .*illegal' "$logs/vm-a.log" | head -3)"
r=$(printf_ok "$logs/vm-a.log" 7 "P-PRINTF ") && result PASS "P: kernel printf lines in the program's own stdout, between its lines before and after the sync" || result FAIL "P: printf" "$r"
[[ $(grep -c '^P-SOAK PASS soak' "$logs/vm-a.log") == 2 ]] && ! grep -E '^P-SOAK SOAK' "$logs/vm-a.log" | grep -qv 'corrupt=0 ' \
	&& result PASS "P: two soaks of the same VM beside the faulting processes: 0 corrupt ($(grep -E '^P-SOAK SOAK' "$logs/vm-a.log" | grep -o 'checked=[0-9]*' | tr '\n' ' '))" \
	|| result FAIL "P: same-VM soaks beside the faults" "$(grep -E '^P-SOAK' "$logs/vm-a.log" | tail -4 | tr '\n' ' ')"
if [[ $device == sim ]] && grep -q '^SKIP sticky_error' "$logs/vm-a.log"; then result SKIP "A: sticky error (the sim device cannot fault)"
elif grep -q '^PASS sticky_error' "$logs/vm-a.log"; then result PASS "A: sticky error detected (700)"
else result FAIL "A: sticky_error" "$(grep -E '^(FAIL|SKIP) sticky' "$logs/vm-a.log")"; fi
[[ $(grep -c '^PASS soak' "$logs/vm-a.log") -ge 1 ]] && result PASS "A: a new program works after A's sticky error" || result FAIL "A: program after the sticky error"
grep -q 'GUEST-FAULTS PASS' "$logs/vm-a.log" && result PASS "A: guest faults (kills mid-copy/mid-launch, cleanup, attacks, soak)" || result FAIL "A: guest-faults.sh" "$(grep 'PHASE.*FAIL' "$logs/vm-a.log" | head -3)"
grep -qE '^ALLOC [0-9]+ 2 ' "$logs/vm-a.log" && result PASS "A: over the cap gets CUDA_ERROR_OUT_OF_MEMORY" || result FAIL "A: over-cap allocation"
grep -qE '^ALLOC [0-9]+ 0 ' "$logs/vm-a.log" && result PASS "A: within the cap works" || result FAIL "A: within-cap allocation"
[[ $rcA == 0 ]] || result FAIL "A: vm run exit $rcA"
grep -E '^GSTART vgpu +(first-call|first-copy)' "$logs/vm-a.log" | sed 's/^GSTART /start in the guest (TCG): /' | tee -a "$summary"

wait $hf
cp "$logs"/host-*.out "$logs"/host-*.err "$logs/host-faults.log" "$out/" 2>/dev/null
grep -q 'H assert exit 0' "$logs/host-faults.log" && grep -q 'PASS isolation assert' "$logs/host-assert.out" && grep -q 'Assertion' "$logs/host-assert.err" \
	&& result PASS "H: a host-mode client's device assert: 710 and the assertion on its stderr, beside B's soaks" || result FAIL "H: host-mode assert" "$(cat "$logs/host-assert.out" "$logs/host-assert.err" | tail -3)"
grep -q 'H illegal exit 0' "$logs/host-faults.log" && grep -q 'PASS isolation illegal' "$logs/host-illegal.out" \
	&& result PASS "H: a host-mode client's illegal address: 700, beside B's soaks" || result FAIL "H: host-mode illegal" "$(tail -3 "$logs/host-illegal.out")"
r=$(printf_ok "$logs/host-printf.out" 5) && result PASS "H: a host-mode client's kernel printf in its own stdout, in order" || result FAIL "H: host-mode printf" "$r"
grep -q 'vgpu printf probe\|Assertion' "$logs/serve.log" && result FAIL "device output also went to the backend's log" "$(grep -m2 'vgpu printf probe\|Assertion' "$logs/serve.log")" \
	|| result PASS "device output went to its programs only (none in the backend's log)"

# B must still be running now (it must have run through all of A).
kill -0 $b1 2>/dev/null && kill -0 $b2 2>/dev/null && result PASS "B still running after A finished" || result WARN "B ended before A finished (soak shorter than A's run)"
okB=1
for i in 1 2; do eval "wait \$b$i" || okB=0; grep -q '^PASS soak' "$logs/soak-b$i.log" || okB=0; done
grep -h '^SOAK' "$logs"/soak-b*.log | tee "$out/soak-b.txt"
((okB)) && result PASS "B: soak, 0 corrupt bytes, kernels counted" || result FAIL "B: soak" "$(tail -qn2 "$logs"/soak-b*.log)"
awk '{for(i=1;i<=NF;i++){split($i,a,"=");v[a[1]]+=a[2]}} END{printf "B totals: calls=%.0f moved=%.0f checked=%.0f corrupt=%.0f launches=%.0f calls_per_s=%.0f bytes_per_s=%.0f\n", v["calls"], v["moved"], v["checked"], v["corrupt"], v["launches"], v["calls_per_s"], v["bytes_per_s"]}' "$out/soak-b.txt" | tee -a "$summary"

if [[ -n $pc ]]; then
	wait $pc
	tee -a "$summary" <"$out/restart.txt"
fi
sleep 2
"$carry/vgpu" status --status-socket "$ss" --json >"$out/status-after.json"
python3 - "$out/status-after.json" <<'EOP' | tee -a "$summary"
import json, sys
s = json.load(open(sys.argv[1]))
used = sum(d.get("mem_used_by_vgpu", 0) for d in s.get("devices") or [])
allocs = sum(d.get("allocations", 0) for d in s.get("devices") or [])
vms = [v for v in s.get("vms") or [] if v.get("mem_used")]
print(("PASS" if not s.get("sessions") and not used and not allocs and not vms else "FAIL"),
      "backend after both VMs: %d sessions, %d bytes in %d allocations, VMs holding memory: %s" % (len(s.get("sessions") or []), used, allocs, vms))
EOP
# Worker processes (--isolate vm) outlive their sessions; each holds a
# few fds in the manager. Report them, and what guest RAM they still map
# although VM A's QEMU has exited.
fd1=$(fds)
workers=$(python3 -c 'import json,sys; w=(json.load(open(sys.argv[1])).get("workers") or {}).get("workers") or []; print(" ".join(str(x["pid"]) for x in w))' "$out/status-after.json" 2>/dev/null)
nw=$(echo $workers | wc -w)
ramw=0
for p in $workers; do n=$(grep -c 'memfd:' "/proc/$p/maps" 2>/dev/null); ramw=$((ramw + ${n:-0})); done
((fd1 <= fd0 + 4 * nw)) && result PASS "backend fds: $fd0 before, $fd1 after ($nw live workers)" || result FAIL "backend fds" "$fd0 before, $fd1 after ($nw live workers)"
((ramw == 0)) && result PASS "no worker maps guest RAM after the VMs ended" || result WARN "live workers ($workers) still map $ramw guest-RAM (memfd) regions after VM A's QEMU exited"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >"$out/nvidia-smi-after.csv" 2>&1
kill $srv; wait $srv 2>/dev/null; trap - EXIT
echo "== process start (first CUDA calls of a new program): native, worker pool, no pool, --isolate vm, none"
DEVICE=$device N=${START_N:-10} OUT=$out "$repo/scripts/reliability/process-start.sh" "$carry/vgpu" "$carry/lib" >"$logs/process-start.log" 2>&1
sed -n '/^first CUDA calls/,$p' "$out/process-start.txt" | sed 's/^/start: /' | tee -a "$summary"
echo "elapsed $(( $(date +%s) - start )) s, isolate=$isolate, mem-limit=$limit, soak=${soak}s" | tee -a "$summary"
tar czf "$out/logs.tgz" -C /tmp vgpu-rel-logs
! grep -q '^FAIL' "$summary"
