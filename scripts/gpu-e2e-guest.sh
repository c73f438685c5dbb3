#!/usr/bin/env bash
# gpu-e2e-guest.sh CT CARRY RES MAX - runs inside the test guest for
# gpu-e2e.sh: every CUDA test program, then the benchmarks, through vgpu.
set -uo pipefail
ct=$1 carry=$2 res=$3 max=$4
export LD_LIBRARY_PATH=$carry/lib
echo "guest: $(uname -sr), $(nproc) CPUs, $(awk '/MemTotal/ {print $2/1048576 " GiB"}' /proc/meminfo)"
# --timeout 180: pageable_copies fills and checks half the guest's RAM (1 GiB) under TCG.
# vgpu's driver libraries first, then NVIDIA's libcudart.so.13 of the host's toolkit
"$(dirname "$0")/cuda-tests/run.sh" "$ct/sm_90" --lib "$carry/lib:/usr/local/cuda/lib64" --out "$res/programs-guest.csv" --timeout 180
echo "---- vgpu bench calls (guest)"
"$carry/vgpu" bench calls
echo "---- vgpu bench calls (guest, VGPU_RING=0: the vsock stream instead of rings in guest RAM)"
VGPU_RING=0 "$carry/vgpu" bench calls
echo "---- vgpu bench memcpy (guest)"
"$carry/vgpu" bench memcpy --max-size "$max" --min-time 200ms --max-iter 200 --csv "$res/memcpy-guest.csv"
