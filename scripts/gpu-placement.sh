#!/usr/bin/env bash
# gpu-placement.sh [CARRY] - does where the two spinning threads run (the
# program's caller, spinning on its reply, and the backend's ring reader)
# move launch+sync? `vgpu serve --isolate none` pinned to one CPU, the
# program (native, then on vgpu) pinned to that CPU's hardware-thread
# sibling, then to a CPU of another core, ROUNDS (3) times each. BASE=DIR
# adds another build's backend and library beside CARRY's, as in
# gpu-perf.sh. Writes placement.txt to $OUT.
set -uo pipefail
carry=$(realpath "${1:-.gpu}")
out=${OUT:-/tmp/vgpu-out}
mkdir -p "$out"
base=${BASE:+$(realpath "$BASE")}
mt=${MIN_TIME_PAIR:-500ms}
cpu=${SERVE_CPU:-2}
topo=/sys/devices/system/cpu/cpu$cpu/topology
sib=$(tr ',' '\n' <"$topo/thread_siblings_list" | grep -v "^$cpu$" | head -1)
other=$(( (cpu + ${OTHER_STEP:-4}) % $(nproc) ))
[[ -n $sib && $sib == *-* ]] && sib=${sib#*-} # "2-3" lists
{
	echo "# $(nproc) CPUs; serve on CPU $cpu (siblings: $(cat "$topo/thread_siblings_list")), core $(cat "$topo/core_id"); other CPU $other, core $(cat /sys/devices/system/cpu/cpu$other/topology/core_id)"
	lscpu | grep -E 'Model name|Thread|Core|Socket|NUMA|L2|L3'
} | tee "$out/placement.txt"
wait_socket() { for _ in $(seq 100); do [[ -S $1 ]] && return 0; sleep 0.1; done; echo "no socket $1"; }
# run NAME CLIENT_CPU BUILD SOCK: one bench calls, its three us/call.
run() {
	local f=$out/place-$1.txt
	if [[ $3 == native ]]; then
		taskset -c "$2" timeout 60 "$carry/vgpu" bench calls --native --min-time "$mt" >"$f" 2>&1
	else
		LD_LIBRARY_PATH="$3/lib" VGPU_TRANSPORT="unix:$4" taskset -c "$2" timeout 60 "$3/vgpu" bench calls --min-time "$mt" >"$f" 2>&1
	fi
	awk -v n="$1" '$1=="native"||$1=="vgpu" {if (NF==5) v[$2]=$4} END {printf "%-24s async %6.2f  launch+sync %6.2f  d2h-4B %6.2f\n", n, v["launch-async"], v["launch+sync"], v["d2h-4B"]}' "$f"
}
builds="$carry"
[[ -n $base ]] && builds="$carry $base"
for b in $builds; do
	tag=new
	[[ $b == "$base" ]] && tag=base
	sock=/tmp/vgpu-place-$tag.sock
	rm -f "$sock"
	taskset -c "$cpu" "$b/vgpu" serve --device "${DEVICE:-cuda}" --sim-mem 4G --unix "$sock" --isolate none --log-level warn >"$out/serve-place-$tag.log" 2>&1 &
	eval "srv_$tag=$!"
done
for b in $builds; do wait_socket "/tmp/vgpu-place-$([[ $b == "$base" ]] && echo base || echo new).sock"; done
for i in $(seq "${ROUNDS:-3}"); do
	for where in sibling other; do
		c=$other
		[[ $where == sibling ]] && c=$sib
		[[ -z $c ]] && continue
		run "native-$where-$i" "$c" native
		for b in $builds; do
			tag=new
			[[ $b == "$base" ]] && tag=base
			run "$tag-$where-$i" "$c" "$b" "/tmp/vgpu-place-$tag.sock"
		done
	done
done | tee -a "$out/placement.txt"
kill ${srv_new:-} ${srv_base:-} 2>/dev/null
wait 2>/dev/null
