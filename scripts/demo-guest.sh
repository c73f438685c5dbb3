#!/usr/bin/env bash
# demo-guest.sh CT LIB VGPU - runs inside the demo guest: a few CUDA programs
# through /dev/vgpu, then the memcpy benchmark as the guest sees it.
set -uo pipefail
ct=$1 lib=$2 vgpu=$3
echo "guest: $(uname -sr), $(nproc) CPUs, no GPU; /dev/vgpu: $(ls -l /dev/vgpu 2>/dev/null || echo missing)"
status=0
# vgpu's driver libraries first; NVIDIA's libcudart from the system path, or
# from a toolkit in /usr/local/cuda (CUDA 13 on a GPU machine)
rt=$lib
[[ -d /usr/local/cuda/lib64 ]] && rt=$lib:/usr/local/cuda/lib64
for p in device_props add1_doubles vector_add matmul_tiled streams_overlap; do
	echo "---- guest\$ $p"
	LD_LIBRARY_PATH=$rt "$ct/$p" || status=1
done
echo "---- guest\$ vgpu bench memcpy (sizes up to 64 MiB)"
LD_LIBRARY_PATH=$lib "$vgpu" bench memcpy --max-size 64M --min-time 100ms --max-iter 50 || status=1
exit $status
