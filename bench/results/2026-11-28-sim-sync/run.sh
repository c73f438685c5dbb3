#!/usr/bin/env bash
# run.sh OUT: `vgpu bench calls` on the sim device (vgpu serve --trace,
# --isolate none) with this checkout's bin/vgpu and guest-lib/build, the
# library with VGPU_STATS=1 (round trips per opcode), alternating, twice:
#   host-on / host-off   host mode on rings, BATCH_SYNC on (default) / off
#                        (VGPU_BATCH_SYNC=0: the batch, then the call)
#   guest-on / guest-off guest mode on rings in "guest RAM" through
#                        tests/fakedev.c (FAKEDEV_RING=1: a fake /dev/vgpu
#                        that plays vgpu.ko and the backend's side of the
#                        rings, replaying each frame to the backend over
#                        host mode): with BATCH_SYNC off a sync point sends
#                        the batch as a call first (two round trips)
# Needs: make vgpu; make -C guest-lib; fakedev.so built by guest-lib tests
# (or: cc -shared -fPIC -Iprotocol -Iguest-driver/include -o $OUT/fakedev.so
# guest-lib/tests/fakedev.c -ldl -lpthread).
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd)
out=$1
mkdir -p "$out"
sock=/tmp/sync-bench.sock
fake=$out/fakedev.so
[[ -f $fake ]] || cc -std=c11 -D_GNU_SOURCE -O1 -fPIC -shared -I"$R/protocol" -I"$R/guest-driver/include" -o "$fake" "$R/guest-lib/tests/fakedev.c" -ldl -lpthread
one() { # NAME MODE ENV...
	local name=$1 mode=$2
	shift 2
	rm -f $sock
	"$R/bin/vgpu" serve --device sim --sim-mem 4G --unix $sock --isolate none --trace --log-level warn >"$out/serve-$name.log" 2>&1 &
	local p=$!
	for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
	if [[ $mode == host ]]; then
		env "$@" VGPU_STATS=1 LD_LIBRARY_PATH="$R/guest-lib/build" VGPU_TRANSPORT=unix:$sock \
			"$R/bin/vgpu" bench calls --min-time 1s >"$out/calls-$name.txt" 2>&1
	else
		env "$@" VGPU_STATS=1 FAKEDEV_RING=1 FAKEDEV_SOCK=$sock VGPU_DEVICE=/dev/vgpu-fake LD_PRELOAD="$fake" LD_LIBRARY_PATH="$R/guest-lib/build" \
			"$R/bin/vgpu" bench calls --min-time 1s >"$out/calls-$name.txt" 2>&1
	fi
	kill $p
	wait $p 2>/dev/null
}
for r in 1 2 3; do
	one host-off-$r host VGPU_BATCH_SYNC=0
	one host-on-$r host
	one guest-off-$r guest VGPU_BATCH_SYNC=0
	one guest-on-$r guest
done
rm -f "$fake"
