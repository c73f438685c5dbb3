#!/usr/bin/env bash
# gpu-fault-crosstalk.sh CARRY - does a kernel fault in one process corrupt
# another process's copies on this GPU? Four phases, each a 2-process soak
# (scripts/reliability/soak.cu) for 30 s while, at 10 s, a separate process
# runs sticky_error (a kernel that stores to address 0x100):
#   1. native soak, no fault            (baseline)
#   2. native soak, native fault        (the GPU and driver alone)
#   3. vgpu host-mode soak, native fault
#   4. vgpu host-mode soak, no fault
# Prints one line per phase with the corrupt-byte count.
set -uo pipefail
carry=$(realpath "${1:-.gpu}")
export PATH=/usr/local/cuda/bin:$PATH
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=$repo/build/xtalk
mkdir -p "$bin"
scripts/reliability/build.sh "$bin" >/dev/null 2>&1 || { echo "build failed"; exit 1; }
sock=/tmp/xtalk.sock
"$carry/vgpu" serve --device cuda --isolate vm --unix "$sock" --log-level warn >/tmp/xtalk-serve.log 2>&1 &
srv=$!
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
phase() { # name mode(native|vgpu) fault(0|1)
	local env=()
	[[ $2 == vgpu ]] && env=(VGPU_TRANSPORT=unix:$sock LD_LIBRARY_PATH=$carry/lib)
	for i in 1 2; do env "${env[@]}" "$bin/soak" --seconds 30 --streams 4 --bytes $((8 << 20)) --launch --seed $i >"/tmp/xtalk-$1-$i.log" 2>&1 & done
	if [[ $3 == 1 ]]; then sleep 10; "$bin/sticky_error" >/tmp/xtalk-$1-fault.log 2>&1; fi
	wait $(jobs -p | grep -v "^$srv\$") 2>/dev/null
	echo "$1: $(grep -ho 'corrupt=[0-9]*' /tmp/xtalk-$1-*.log | tr '\n' ' ') $(grep -h '^corrupt:' /tmp/xtalk-$1-*.log | head -1)"
}
phase native-nofault native 0
phase native-fault native 1
phase vgpu-nativefault vgpu 1
phase vgpu-nofault vgpu 0
kill $srv
