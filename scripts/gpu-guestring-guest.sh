#!/usr/bin/env bash
# gpu-guestring-guest.sh CARRY WHAT... - runs inside the test guest for
# gpu-guestring.sh. WHAT: calls (bench calls on rings and with VGPU_RING=0,
# twice, in turns, then on rings with VGPU_BATCH_SYNC=0), calls-once (each once), longspin (on rings with
# VGPU_RING_SPIN_US=2000), programs CT (a few CUDA programs on rings, each
# checked to have used them), nccl PROG (the single-GPU NCCL program).
set -uo pipefail
carry=$1
shift
vgpu=$carry/vgpu
mt=${MIN_TIME:-1s}
echo "guest: $(uname -sr), $(nproc) CPUs"
bench() { # bench LABEL ENV...
	local label=$1
	shift
	echo "---- $label"
	env "$@" VGPU_LOG=info "$vgpu" bench calls --min-time "$mt" 2>&1 | grep -E '^(side|vgpu |#)|rings in guest RAM|stream'
}
while (($#)); do
	case $1 in
	calls)
		for round in 1 2; do
			if ((round == 2)); then # with the library's waits table (replies per call)
				bench "rings, VGPU_STATS=1 (round $round)" VGPU_RING=1 VGPU_STATS=1
			else
				bench "rings (round $round)" VGPU_RING=1
			fi
			bench "stream, VGPU_RING=0 (round $round)" VGPU_RING=0
		done
		# a sync point after queued calls sends the batch as a call first
		# (two round trips per launch+sync; BATCH_SYNC's default: one)
		bench "rings, VGPU_BATCH_SYNC=0, VGPU_STATS=1" VGPU_RING=1 VGPU_BATCH_SYNC=0 VGPU_STATS=1
		;;
	calls-once)
		bench "rings" VGPU_RING=1
		bench "stream, VGPU_RING=0" VGPU_RING=0
		;;
	longspin)
		bench "rings, VGPU_RING_SPIN_US=2000" VGPU_RING=1 VGPU_RING_SPIN_US=2000
		bench "stream, VGPU_RING=0" VGPU_RING=0
		;;
	programs)
		ct=$2
		shift
		for p in vector_add host_callback two_threads streams_overlap memcpy_to_symbol sticky_error; do
			o=$(VGPU_LOG=info timeout 120 "$ct/$p" 2>&1)
			rc=$?
			echo "prog=$p rc=$rc rings=$(grep -c 'on rings in guest RAM' <<<"$o")"
			((rc == 0)) || tail -5 <<<"$o"
		done
		;;
	nccl)
		# single-GPU NCCL (scripts/cuda-libs/nccl.cu) on NVIDIA's static runtime
		o=$(NCCL_DEBUG=WARN timeout 120 "$2" 2>&1)
		echo "prog=nccl rc=$?"
		tail -5 <<<"$o"
		shift
		;;
	esac
	shift
done
dmesg | grep -E "vgpu: (session .*rings|rings refused)" | tail -3 || true
