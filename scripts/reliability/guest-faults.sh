#!/bin/sh
# guest-faults.sh BIN LIB [SOAK_SECONDS] [PROCS] [STREAMS] - runs as root inside
# a test guest with vgpu.ko loaded (see backend/faulttest/vm_test.go and
# gpu-reliability.sh). BIN holds soak and guest-attack.py, LIB the guest
# libraries. Phases (each prints "PHASE <name> ok|FAIL ..."):
#   baseline  cudaMemGetInfo through a fresh session
#   kill-copy     SIGKILL soak processes mid-copy (16 MiB buffers), 3 times
#   kill-launch   SIGKILL soak processes mid-launch (tiny buffers, --launch), 3 times
#   cleanup   the device's free memory returns to the baseline (poll 30 s)
#   pins      no guest pages left pinned (/proc/vmstat nr_foll_pin_*)
#   attack    crafted frames from a root process on a privileged port, and
#             from an unprivileged port (guest-attack.py)
#   soak      PROCS processes x STREAMS streams for SOAK_SECONDS, all PASS
#   final     free memory back to the baseline
# Last line: "GUEST-FAULTS PASS" or "GUEST-FAULTS FAIL".
bin=$1 lib=$2 secs=${3:-20} procs=${4:-2} streams=${5:-2}
export LD_LIBRARY_PATH=$lib
fail=0
phase() { echo "PHASE $*"; case "$2" in ok) ;; *) fail=1 ;; esac; }
[ -c /dev/vgpu ] || { echo "no /dev/vgpu"; echo "GUEST-FAULTS FAIL"; exit 1; }
tmp=$(mktemp -d)

meminfo() { "$bin/soak" --meminfo | sed -n 's/^MEMINFO \([0-9]*\) .*/\1/p'; }
base=$(meminfo)
[ -n "$base" ] && phase baseline ok "free=$base" || phase baseline FAIL "no meminfo"

# killer NAME ARGS...: start soak, wait until it has done a round, kill -9 it
# while it is busy, report where it was (its kernel wait channel).
killer() {
	name=$1; shift
	for i in 1 2 3; do
		rm -f "$tmp/ready"
		"$bin/soak" --seconds 0 --ready-file "$tmp/ready" "$@" >"$tmp/$name.$i.log" 2>&1 &
		pid=$!
		n=0
		while [ ! -e "$tmp/ready" ] && kill -0 $pid 2>/dev/null && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done
		if [ ! -e "$tmp/ready" ]; then phase "$name" FAIL "soak never got ready: $(tail -2 "$tmp/$name.$i.log")"; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null; return; fi
		sleep 0.$((i*3))
		# Aim for the moment the process waits on the host inside the
		# driver (wchan vgpu_*): a call in flight.
		n=0
		while [ $n -lt 200 ]; do
			wchan=$(cat /proc/$pid/wchan 2>/dev/null)
			case "$wchan" in vgpu*) break ;; esac
			n=$((n+1))
		done
		kill -9 $pid
		wait $pid 2>/dev/null
		echo "killed $name #$i (pid $pid) in ${wchan:-?}"
	done
	phase "$name" ok
}
killer kill-copy --bytes $((16 << 20)) --streams 2 --pageable-every 1
killer kill-launch --bytes 4096 --streams 4 --launch

waitbase() {
	n=0
	while [ "$(meminfo)" != "$base" ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n+1)); done
	now=$(meminfo)
	[ "$now" = "$base" ] && phase "$1" ok "free=$now" || phase "$1" FAIL "free=$now want $base"
}
waitbase cleanup

# Pinned guest pages: the driver pins user buffers with pin_user_pages
# (FOLL_PIN); with no call in flight every pin must have been released,
# including those of the killed processes.
# A session's last pins go when the driver has the backend's answer to its
# last request, which can come a little after the process is gone (the
# backend finishes the DMA first): wait up to 10 s, and say how long it took.
pins() { awk '/^nr_foll_pin_acquired/{a=$2} /^nr_foll_pin_released/{r=$2} END{print a-r, a}' /proc/vmstat; }
n=0
while set -- $(pins); [ "${1:-x}" != 0 ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done
[ "${1:-x}" = 0 ] && phase pins ok "0 pages pinned after $((n / 10)).$((n % 10)) s, ${2:-?} pins taken so far" || phase pins FAIL "${1:-?} pages still pinned after 10 s (${2:-?} taken)"

if [ -x /usr/bin/python3 ]; then
	if /usr/bin/python3 "$bin/guest-attack.py"; then phase attack ok; else phase attack FAIL; fi
else
	echo "PHASE attack skipped (no /usr/bin/python3)"
fi

i=0
while [ $i -lt "$procs" ]; do
	"$bin/soak" --seconds "$secs" --streams "$streams" --launch --seed $((i+1)) >"$tmp/soak.$i.log" 2>&1 &
	eval "p$i=$!"
	i=$((i+1))
done
i=0; ok=1
while [ $i -lt "$procs" ]; do
	eval "wait \$p$i" || ok=0
	grep '^SOAK' "$tmp/soak.$i.log"
	tail -1 "$tmp/soak.$i.log" | grep -q '^PASS soak' || { ok=0; tail -3 "$tmp/soak.$i.log"; }
	i=$((i+1))
done
[ $ok = 1 ] && phase soak ok "$procs procs x $streams streams, $secs s" || phase soak FAIL
waitbase final
set -- $(pins)
[ "${1:-x}" = 0 ] && phase pins-final ok "0 pages pinned, ${2:-?} pins taken in all" || phase pins-final FAIL "${1:-?} pages still pinned"

rm -rf "$tmp"
if [ $fail = 0 ]; then echo "GUEST-FAULTS PASS"; else echo "GUEST-FAULTS FAIL"; fi
exit $fail
