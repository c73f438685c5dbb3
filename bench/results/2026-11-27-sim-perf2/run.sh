#!/usr/bin/env bash
# run.sh BEFORE AFTER OUT: vgpu bench calls and memcpy (pageable, up to 64 MiB)
# on the sim device in host mode (--isolate none, --trace), the checkout
# BEFORE (built: bin/vgpu, guest-lib/build) against AFTER, alternating,
# twice; AFTER also with --d2h-small sync, VGPU_BATCH_FIRST=4096 and
# VGPU_STAGING_THREADS=2. The bench program is AFTER's.
set -u
B=$(realpath "$1") A=$(realpath "$2") out=$3
mkdir -p "$out"
one() { # NAME BIN LIB SERVEARGS ENV...
	local name=$1 bin=$2 lib=$3 sargs=$4; shift 4
	rm -f /tmp/p2s.sock
	$bin serve --device sim --sim-mem 4G --unix /tmp/p2s.sock --isolate none --trace $sargs --log-level warn >$out/serve-$name.log 2>&1 &
	local p=$!
	for _ in $(seq 100); do [[ -S /tmp/p2s.sock ]] && break; sleep 0.1; done
	env "$@" LD_LIBRARY_PATH=$lib VGPU_TRANSPORT=unix:/tmp/p2s.sock $A/bin/vgpu bench calls --min-time 1s >$out/calls-$name.txt 2>&1
	env "$@" LD_LIBRARY_PATH=$lib VGPU_TRANSPORT=unix:/tmp/p2s.sock $A/bin/vgpu bench memcpy --max-size 64M --paths pageable-auto >$out/memcpy-$name.txt 2>&1
	kill $p; wait $p 2>/dev/null
}
for r in 1 2; do
	one before-$r $B/bin/vgpu $B/guest-lib/build ""
	one after-$r $A/bin/vgpu $A/guest-lib/build ""
	one after-sync-$r $A/bin/vgpu $A/guest-lib/build "--d2h-small sync"
	one after-batch4096-$r $A/bin/vgpu $A/guest-lib/build "" VGPU_BATCH_FIRST=4096
	one after-thr2-$r $A/bin/vgpu $A/guest-lib/build "" VGPU_STAGING_THREADS=2
done
