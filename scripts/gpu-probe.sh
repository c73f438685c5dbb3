#!/usr/bin/env bash
# gpu-probe.sh - facts from the GPU machine's real driver, in one command:
#   1. cuGetProcAddress_v2 of every driver name at every CUDA version and flag
#      (scripts/probe/procaddr-probe.c) -> $OUT/procaddr-probe.txt, from which
#      `go run ./guest-lib/gen -procaddr FILE` writes guest-lib/tables/procaddr.tbl
#   2. what a sticky error in one context does to the process's other contexts,
#      and what a context costs to start (scripts/probe/ctx-probe.c)
#   3. versions of the driver, toolkit and the torch wheel's NVIDIA libraries
set -uo pipefail
out=${OUT:-/tmp/vgpu-probe}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
b=/tmp/probe-build
mkdir -p $b
grep -v '^#' guest-lib/tables/libcuda.so.1.tbl | awk 'NF{print $1}' | grep '^cu' |
	sed -E 's/_(ptsz|ptds)$//; s/_v[0-9]+$//' | sort -u >$b/names.txt
echo "== $(wc -l <$b/names.txt) base names"
cc -O1 -o $b/procaddr scripts/probe/procaddr-probe.c -ldl && $b/procaddr $b/names.txt >"$out/procaddr-probe.txt" 2>&1
echo "procaddr rc=$? lines=$(wc -l <"$out/procaddr-probe.txt")"; grep '^#' "$out/procaddr-probe.txt"
nvcc -arch=sm_90 -ptx -o $b/k.ptx scripts/probe/ctx-kernels.cu &&
	cc -O1 -I/usr/local/cuda/include -o $b/ctx scripts/probe/ctx-probe.c $(ls /usr/local/nvidia/lib64/libcuda.so.1 2>/dev/null || echo -lcuda)
{ echo "== illegal"; timeout 120 $b/ctx $b/k.ptx illegal; echo "== assert"; timeout 120 $b/ctx $b/k.ptx assert; } 2>&1 | tee "$out/ctx-probe.txt"
{
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
	nvcc --version | tail -2
	python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1
	ls -la /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib/ 2>&1
	cp /usr/local/cuda/include/cudaTypedefs.h "$out/" 2>/dev/null
} >"$out/versions.txt" 2>&1
tail -3 "$out/versions.txt"
